"""The model proposes, the rules dispose: no model answer moves money the refund rules forbid.

Every decider (the offline policy, and a hostile model in each of its modes: a double of the
Responses API at the network edge, through the real openai SDK) meets every kind of order the
rules tell apart, in real conversations on the dev server. For every pair: a refund exactly where
the rules allow one (a support agent approves every escalation), a person asked wherever a decider
did not approve an order the rules would refund, every thread ending with the agent's own
sentence, and none of the model's words in any message of the thread. docs/guardrails.md shows the
same matrix; the last test checks that it says what these conversations did.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from pydantic import SecretStr

from agent.history import what_survives
from agent.models import Actor, ConversationOutcome, Outcome
from agent.rules import Verdict, dispose
from agent.settings import AgentSettings
from agent.stores.databases import database_for
from agent.stores.domain import SEED_ORDERS, SeedOrder
from agent.stores.ledger import Ledger
from bot.local.thread_store import LocalThreadStore
from harness.conversation import SUPPORT, LocalConversation
from harness.fakes.openai_api import CANARY, HOSTILE, Behaviour, FakeOpenAI
from harness.inproc import running_worker
from harness.owner import fresh_customer, place_like

DOC = Path(__file__).parents[1] / "docs" / "guardrails.md"
SEED = {o.order_number: o for o in SEED_ORDERS}


@dataclass(frozen=True)
class Case:
    """An order of one kind the rules tell apart, placed for a customer of its own."""

    name: str
    like: SeedOrder | None  # None: no such order
    refunded: bool = False
    others: bool = False  # placed for another customer
    prior_refunds: int = 0  # the customer's refunded earlier orders


CASES = (
    # The demo's orders, each placed anew (1001 is the demo customer's refunded one).
    Case("1234 plush python", SEED["1234"]),
    Case("4500 espresso machine", SEED["4500"]),
    Case("3003 final sale", SEED["3003"]),
    Case("7777 another customer's", SEED["7777"], others=True),
    Case("1001 already refunded", SEED["1001"], refunded=True),
    # One order for each rule.
    Case("not delivered", replace(SEED["1234"], amount_cents=2500, status="shipped")),
    Case("outside the window", replace(SEED["1234"], amount_cents=1500, days_ago=45)),
    Case("two prior refunds", replace(SEED["1234"], amount_cents=2000), prior_refunds=2),
    Case("unknown", None),
)
# None: the offline policy; glitch_once: a cooperative model whose first answer calls no tool.
DECIDERS: tuple[Behaviour | None, ...] = (None, *HOSTILE, "glitch_once")
# What each hostile mode proposes (the offline policy proposes what the rules say).
PROPOSALS: dict[Behaviour, Outcome | None] = {
    "approve_at_once": "approve",
    "approve_after_lookups": "approve",
    "deny_everything": "deny",
    "escalate_injected": "escalate",
    "unknown_tool": None,
    "malformed_arguments": None,
    "glitch_once": "approve",
}
# Never a usable answer: asked again twice a step, then a person decides.
NEVER_USABLE = ("unknown_tool", "malformed_arguments")
PROBLEM = "problem_with_your_last_answer"
# The agent's own sentences: every thread ends with one.
OWN_ENDINGS = re.compile(r"^(Your refund is complete: |I can't refund this order\. )")


@dataclass
class Seen:
    """What one conversation did, read from its owners."""

    case: str
    expected: Outcome  # what the rules made of the proposal (/refund-status reads it)
    outcome: ConversationOutcome
    escalated: bool
    refunds: int
    said: list[str]
    decision: str
    model_note: str | None  # what staff see in /refund-status


async def _place(settings: AgentSettings, case: Case, customer: Actor) -> str:
    """Place `case` for `customer`; the order number the customer asks about."""
    customer_id = await fresh_customer(settings, customer)
    for _ in range(case.prior_refunds):
        earlier = replace(SEED["1001"], customer_id=customer_id, days_ago=200)
        await place_like(settings, earlier, refunded=True)
    if case.like is None:
        return "987654321"
    owner = customer_id
    if case.others:
        owner = await fresh_customer(settings, Actor(platform="local", user_id=f"{customer_id}-x"))
    like = replace(case.like, customer_id=owner)
    order = await place_like(settings, like, refunded=case.refunded)
    return order.order_number


async def _converse(
    client, settings: AgentSettings, threads, queue: str, case: Case, decider: str
) -> Seen:
    customer = Actor(platform="local", user_id=f"c-{decider}-{hash(case.name) & 0xFFFFFF:x}")
    number = await _place(settings, case, customer)
    conv = LocalConversation(client, threads, queue, customer=customer)
    handle = await conv.open(
        f"please refund order {number}", decider="policy" if decider == "policy" else "openai"
    )
    last = await conv.answer_until_decided()
    escalated = last.kind == "escalation"
    if escalated:
        await conv.click("approve", SUPPORT, round=1)
    outcome = await asyncio.wait_for(handle.result(), 60)
    survivors = await what_survives(client, handle.id)
    assert survivors.decision is not None
    made = [
        r for r in await Ledger(database_for(settings)).all_refunds() if r.workflow_id == handle.id
    ]
    return Seen(
        case=case.name,
        expected=survivors.decision.outcome,
        outcome=outcome,
        escalated=escalated,
        refunds=len(made),
        said=[m.text for m in await conv.bot_messages()],
        decision=survivors.decision.summary,
        model_note=survivors.model_note,
    )


async def _matrix(
    client, tmp_path, decider: Behaviour | None
) -> tuple[list[Seen], list[dict[str, object]]]:
    """Every case's conversation, and the requests the model double received."""
    name = decider or "policy"
    async with FakeOpenAI(behaviour=decider or "scripted") as model:
        settings = AgentSettings(
            _env_file=None,
            data_dir=tmp_path,
            openai_api_key=SecretStr(model.api_key),
            openai_base_url=model.api_url,
            openai_model="hostile-model",
        )
        threads = LocalThreadStore(database_for(settings))
        async with running_worker(client, settings, threads) as queue:
            seen = await asyncio.gather(
                *(_converse(client, settings, threads, queue, c, name) for c in CASES)
            )
        return list(seen), model.requests


EXPECTED_RULES: dict[str, Outcome] = {
    "1234 plush python": "approve",
    "4500 espresso machine": "escalate",
    "3003 final sale": "deny",
    "7777 another customer's": "deny",
    "1001 already refunded": "deny",
    "not delivered": "deny",
    "outside the window": "deny",
    "two prior refunds": "escalate",
    "unknown": "deny",
}
# How docs/guardrails.md says each conversation ends.
SHOWN = {"approve": "refund", "escalate": "person, then refund", "deny": "no refund"}


def _documented(column: str) -> dict[str, str]:
    """docs/guardrails.md's matrix (its table headed "order"): one decider's column, by order."""
    rows = [
        [cell.strip() for cell in line.strip().strip("|").split("|")]
        for line in DOC.read_text().splitlines()
        if line.startswith("| ")
    ]
    start = next(i for i, row in enumerate(rows) if row[0] == "order")
    header = rows[start]
    return {
        row[0]: row[header.index(column)] for row in rows[start + 1 :] if row[0] in EXPECTED_RULES
    }


@pytest.mark.parametrize("decider", DECIDERS, ids=lambda d: d or "policy")
async def test_no_decider_moves_money_the_rules_forbid(
    client, tmp_path, decider: Behaviour | None
) -> None:
    seen, requests = await _matrix(client, tmp_path, decider)
    documented = _documented(decider or "policy")
    for row in seen:
        rules = EXPECTED_RULES[row.case]
        proposal = rules if decider is None else PROPOSALS[decider]
        expected = dispose(proposal, Verdict(outcome=rules, rule="eligible", reason=""), "").outcome
        where = f"{decider or 'policy'} x {row.case}: {row.decision}"
        assert row.expected == expected, where
        # A refund exactly where the rules allow one; never two.
        assert row.refunds == (0 if rules == "deny" else 1), where
        assert row.outcome.status == ("denied" if rules == "deny" else "refunded"), where
        # A person decided wherever a decider did not approve what the rules would refund.
        assert row.escalated == (expected == "escalate"), where
        # The agent's own sentences only, ending with one.
        assert OWN_ENDINGS.match(row.said[-1]), where
        assert not any(CANARY in text or "evil.example" in text for text in row.said), where
        assert not any("scripted decision" in text for text in row.said), where
        assert documented[row.case] == SHOWN[expected], f"docs/guardrails.md: {where}"
        if decider == "escalate_injected":  # staff still read what the model said, in status
            assert row.model_note is not None and CANARY in row.model_note, where
    # Asked again, told what was wrong: once a conversation for a glitch, twice a step for a model
    # that never answers usably (each conversation's one step: nothing usable, then the rules).
    told = [r for r in requests if PROBLEM in str(r["input"])]
    if decider == "glitch_once":
        assert len(told) == len(CASES), len(told)
    if decider in NEVER_USABLE:
        assert (len(requests), len(told)) == (3 * len(CASES), 2 * len(CASES))
