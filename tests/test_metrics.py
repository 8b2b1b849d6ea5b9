"""The metrics the dashboard and the alert rules read, scraped from a bot's and a Worker's exporter.

one conversation (an escalation, approved) on a Runtime with refund-bot's Prometheus exporter
    -> the bot's /metrics (refund_bot/ops.py): the exporter's text with the gauges set
    -> every metric named by manifests/grafana/refund-bot.json and manifests/prometheus/ is
       there; the new ones say what happened (a turn, an ending, an escalation waiting)
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from agent.settings import AgentSettings
from agent.stores.databases import database_for
from bot.inbox import Inbox
from bot.local.thread_store import LocalThreadStore
from bot.platform_health import PlatformHealth
from harness import free_port
from harness.codec import TEST_CONVERTER
from harness.conditions import wait_for
from harness.conversation import SUPPORT, LocalConversation
from harness.inproc import running_worker
from harness.metrics import scrape, total
from refund_bot.ops import Ops, serving_ops
from worker.conversation_metrics import DECIDE
from worker.telemetry import prometheus_runtime

ROOT = Path(__file__).parent.parent
DASHBOARD = ROOT / "manifests" / "grafana" / "refund-bot.json"
RULES = ROOT / "manifests" / "prometheus" / "refund-bot-alerts.yaml"
# A metric's name in a PromQL expression: refund-bot's and the Temporal SDK's.
NAME = re.compile(r"\b((?:refund_bot|temporal)_[a-z0-9_]+)")
# A histogram's series are its name with these.
SERIES = ("_bucket", "_sum", "_count")


def names_in(expression: str) -> set[str]:
    return set(NAME.findall(expression))


def dashboard_expressions() -> list[str]:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    return [target["expr"] for panel in panels for target in panel.get("targets", [])]


def rule_expressions() -> list[str]:
    return re.findall(r"^\s+expr: (.+)$", RULES.read_text(), flags=re.MULTILINE)


def exported(text: str) -> set[str]:
    """The metric families of a Prometheus text page, and each histogram's series names."""
    families = set(re.findall(r"^# TYPE (\S+) ", text, flags=re.MULTILINE))
    return families | {f + s for f in families for s in SERIES}


async def test_every_metric_the_dashboard_and_the_alerts_name_is_exported(
    temporal_env: WorkflowEnvironment,
    agent_settings: AgentSettings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    exporter = f"127.0.0.1:{free_port()}"
    # One Runtime for the bot's and the Worker's metrics here; each process has its own.
    runtime = prometheus_runtime(exporter)
    target = temporal_env.client.service_client.config.target_host
    client = await Client.connect(target, runtime=runtime, data_converter=TEST_CONVERTER)
    threads = LocalThreadStore(database_for(agent_settings))
    slack = PlatformHealth("slack")
    slack.connected()
    async with running_worker(client, agent_settings, threads) as task_queue:
        ops = Ops(
            client,
            Inbox(database_for(agent_settings)),
            [slack],
            f"http://{exporter}/metrics",
            runtime.metric_meter,
            task_queue=task_queue,
        )
        address = f"127.0.0.1:{free_port()}"
        async with serving_ops(address, ops):
            conversation = LocalConversation(client, threads, task_queue)
            opened_at = time.time()
            handle = await conversation.open("refund order 4500")
            assert (await conversation.next_bot_message()).text == "Was the package opened?"
            await conversation.reply("Yes")
            assert (await conversation.next_bot_message()).text == "What was damaged?"
            # As the router sends a reply: an Update, whose turn counts under the Signal's label.
            await conversation.reply("Split seam", update=True)
            assert (await conversation.next_bot_message()).kind == "escalation"
            escalated_at = time.time()

            async def the_worker_is_seen() -> str | None:
                # Counted from its heartbeats: a Worker that just started is seen within seconds.
                text = await scrape(f"http://{address}/metrics")
                polling = re.search(
                    rf'refund_bot_workers_polling{{[^}}]*task_queue="{task_queue}"[^}}]*}} 1\n',
                    text,
                )
                return text if polling else None

            waiting = await wait_for(the_worker_is_seen, timeout=30, what="the Worker counted")
            await conversation.click("approve", SUPPORT, round=1)
            assert (await handle.result()).status == "refunded"

            async def ended() -> str | None:
                text = await scrape(f"http://{address}/metrics")
                refunded = total(text, "refund_bot_conversations_ended_total", outcome="refunded")
                return text if refunded >= 1 else None

            done = await wait_for(ended, timeout=10, what="the end exported")

    assert total(waiting, "refund_bot_escalations_waiting") >= 1
    assert total(waiting, "refund_bot_escalation_oldest_age_seconds") >= 0
    assert total(waiting, "refund_bot_workers_polling", task_queue=task_queue) == 1
    assert total(done, "refund_bot_conversations_ended_total", outcome="refunded") >= 1
    assert total(done, "refund_bot_conversations_ended_total", outcome="error") == 0  # at zero

    def turns(series: str, **labels: str) -> float:
        name = f"refund_bot_turn_duration_seconds_{series}"
        return total(done, name, task_queue=task_queue, **labels)

    # The opening, "Yes" (Signals) and "Split seam" (the Update), each counted by the step that
    # answered it (its activity_type): the decide step that posted a question, or a post.
    assert turns("count", signal="customer_message") == 3
    assert turns("count", signal="customer_message", activity_type=DECIDE) == 2
    assert turns("count", signal="approval") == 1
    # Each turn ends before the next reply starts the next (a turn is answered once its question
    # is posted), so the three lie apart within the exchange and add up to less than it took.
    took = turns("sum", signal="customer_message")
    assert 0 < took < escalated_at - opened_at, (took, escalated_at - opened_at)
    assert total(done, "refund_bot_refusals_total", reason="owner_refused") == 0
    assert total(done, "refund_bot_worker_standby") == 0
    assert total(done, "refund_bot_platform_connected", platform="slack") == 1

    names = set().union(*map(names_in, dashboard_expressions() + rule_expressions()))
    assert len(names) >= 12
    missing = sorted(names - exported(done))
    assert not missing, f"named by the dashboard or the rules, not exported: {missing}"


def test_the_dashboard_is_grafana_json_whose_panels_each_query_prometheus() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] == "refund-bot" and dashboard["panels"]
    titles = [p["title"] for p in dashboard["panels"] if p["type"] != "row"]
    assert len(titles) == len(set(titles)) >= 14
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            continue
        assert panel["description"], panel["title"]
        assert panel["targets"] and all(names_in(t["expr"]) for t in panel["targets"])
