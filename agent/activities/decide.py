"""decide_next_step: one turn of the agent's reasoning, pinned behind an Activity.

    DecideInput -> the policy (or the model) -> AgentStep (the Workflow posts a question it asks)

A model call is neither deterministic nor idempotent, so it lives in an Activity: its result is
recorded once in Event History and replayed, never regenerated, after a crash. Offline (the
default) the deterministic policy stands in for the model and costs nothing. With the live model,
the intake questions stay the policy's, so every conversation asks the same things; the model
chooses the lookups, may ask one of the policy's questions still open (in the agent's words), and
proposes the decision, which the Workflow hands to the refund rules.
"""

from __future__ import annotations

from temporalio import activity

from agent import policy
from agent.activities.heartbeat import heartbeating
from agent.models import AgentStep, DecideInput
from agent.settings import AgentSettings


class DecideActivities:
    def __init__(self, settings: AgentSettings) -> None:
        self._settings = settings

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
        return step
