"""decide_next_step: one turn of the agent's reasoning, pinned behind an Activity.

    DecideInput -> the policy (or the model) -> AgentStep; a question it asks is posted here too
    when the Workflow says where (post_question): asking is then one local step, not two

A model call is neither deterministic nor idempotent, so it lives in an Activity: its result is
recorded once in Event History and replayed, never regenerated, after a crash. Offline (the
default) the deterministic policy stands in for the model and costs nothing. With the live model,
the intake questions stay the policy's, so every conversation asks the same things; the model
chooses the lookups, may ask one of the policy's questions still open (in the agent's words), and
proposes the decision, which the Workflow hands to the refund rules.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import get_args

from temporalio import activity

from agent import policy
from agent.activities.heartbeat import heartbeating
from agent.models import (
    AgentStep,
    DecideInput,
    OutboundMessage,
    PostedMessage,
    QuestionId,
    QuestionPost,
)
from agent.settings import AgentSettings

Post = Callable[[OutboundMessage], Awaitable[PostedMessage]]


class DecideActivities:
    def __init__(self, settings: AgentSettings, post: Post) -> None:
        self._settings = settings
        self._post = post  # NotifyActivities.post_to_thread: one key, one message

    @activity.defn
    async def decide_next_step(self, request: DecideInput) -> AgentStep:
        step = policy.next_step(
            request.opening_text, request.memory, request.asked_on, request.order_rule
        )
        if request.decider == "openai" and step.action != "ask":
            async with (
                heartbeating()
            ):  # a live model call can take a while; a dead Worker can't beat
                # Imported here: openai takes most of a second to import, and a Worker that
                # decides offline never needs it (a standby's start-up is a crash's cost).
                from agent.activities.model import model_step

                step = await model_step(request, self._settings)
        activity.logger.info(
            "MODEL REASONING | turn %d (%s): %s %s (retries %d)",
            request.turn,
            step.source,
            step.action,
            step.summary,
            step.model_retries,
        )
        where = request.post_question
        if where is not None and step.action == "ask" and step.question_id in get_args(QuestionId):
            step = step.model_copy(update={"posted": await self._ask(step, where)})
        return step

    async def _ask(self, step: AgentStep, where: QuestionPost) -> PostedMessage | None:
        """The step's question posted once, or None: the Workflow's own post takes it from there
        with the same key, so a try that did post is found rather than repeated."""
        message = OutboundMessage(
            thread=where.thread, key=where.key, kind="question", text=step.question or ""
        )
        try:
            # EXTERNAL EFFECT: the question, at most once per key.
            return await asyncio.wait_for(self._post(message), where.within_seconds)
        except Exception as err:  # a platform slow or down; the detail goes to the log only
            activity.logger.warning("the question's post waits for the Workflow's: %r", err)
            return None
