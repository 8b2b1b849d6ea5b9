"""apply_refund_rules: the refund rules over a decider's proposal, as a step the Workflow records.

    proposal + the lookups' records + the day asked -> agent.rules -> Disposition (recorded)

The rules are pure, but a recorded step keeps a running conversation's decision fixed when the
rules change in a later release: replay returns what they said then.
"""

from __future__ import annotations

from temporalio import activity

from agent import rules
from agent.activities.metrics import count
from agent.models import Disposition, RulesInput


@activity.defn
async def apply_refund_rules(request: RulesInput) -> Disposition:
    order = request.order.order if request.order else None
    history = request.history.history if request.history else None
    found = rules.verdict(request.order_number, order, history, request.asked_on)
    decision = rules.dispose(request.proposal, found, request.decider)
    if decision.overruled:
        count("overruled", rule=decision.rule)
    activity.logger.info("RULES | %s", decision.summary)
    return decision
