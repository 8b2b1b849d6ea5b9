"""decide_next_step: one turn of the agent's reasoning, pinned behind an Activity.

A model call is neither deterministic nor idempotent, so it lives in an Activity: its result is
recorded once in Event History and replayed, never regenerated, after a crash. Offline (the
default) the deterministic policy stands in for the model and costs nothing.
"""

from __future__ import annotations

from temporalio import activity

from agent import policy
from agent.activities.heartbeat import heartbeating
from agent.models import AgentStep, DecideInput


@activity.defn
async def decide_next_step(request: DecideInput) -> AgentStep:
    async with heartbeating():  # a live model call can take a while; a dead Worker cannot beat
        step = policy.next_step(request.opening_text, request.memory)
    activity.logger.info(
        "MODEL REASONING | turn %d: %s %s",
        request.turn,
        step.action,
        step.question_id or step.tool or step.outcome,
    )
    return step
