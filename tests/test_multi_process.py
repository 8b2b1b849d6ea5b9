"""Past one machine: one `refund-bot bot` and two `refund-bot worker` processes on one Temporal and
one shared database, as a deployment runs them (hosts "worker-a" and "worker-b", real processes).

    /refund-grant (Slack, to the bot) -> the grant in the shared database
    conversation 0, only worker-a running: approved -> authorize_refund on worker-a -> refunded
    worker-b joins; conversations 1-3 opened (one opening redelivered, as to another replica)
        and answered; worker-a SIGKILLed mid-conversation
        -> escalations, approvals, authorize_refund and the refunds all on worker-b
    every conversation: "Your refund is complete", exactly one refund at the owner (the ledger)
    /healthz and /metrics of the bot, /metrics of a Worker: the counters of what just happened

Slack is in HTTP mode against the local fake Slack API; the Workers post to the same fake.
"""

from __future__ import annotations

import asyncio
import signal
import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from temporalio.testing import WorkflowEnvironment

from agent.stores.domain import SEED_ORDERS
from bot.slack.render import APPROVE_ACTION_ID
from harness import free_port
from harness.cli_process import RefundBotProcess, clean_environment
from harness.codec import TEST_CODEC_ENV
from harness.conditions import wait_for
from harness.events import local_activity
from harness.fakes.slack_api import Delivery, FakeSlackApi, SlackSender, signed_headers
from tests.support.shared_database import SharedDatabase
from worker.control import worker_identity
from worker.pollers import worker_is_polling

SECRET = "multi-process-signing-secret"
TEAM, CHANNEL = "T0MULTI", "C0SUPPORT"
ADMIN, SAM = ("U0ADMIN", "admin"), ("U0SAM", "sam")
ESPRESSO = next(order for order in SEED_ORDERS if order.order_number == "4500")
STARTUP, TURN = 120.0, 90.0


@dataclass
class Deployment:
    temporal_env: WorkflowEnvironment
    slack: FakeSlackApi
    http: aiohttp.ClientSession
    queue: str
    bot_url: str
    ops_url: str
    env: dict[str, str]
    tmp: Path
    stack: AsyncExitStack
    workers: dict[str, RefundBotProcess] = field(default_factory=dict)
    worker_metrics: dict[str, str] = field(default_factory=dict)
    _seen: dict[str, int] = field(default_factory=dict)
    _openings: dict[str, Delivery] = field(default_factory=dict)

    async def start_worker(self, host: str) -> RefundBotProcess:
        address = f"127.0.0.1:{free_port()}"
        env = {
            **self.env,
            "DATA_DIR": str(self.tmp / host),
            **self.env_shared,
            "REFUND_BOT_HOST": host,
            "WORKER_METRICS_ADDRESS": address,
        }
        worker = await RefundBotProcess.start(["worker"], env, self.tmp)
        self.stack.push_async_callback(worker.close)
        identity = worker_identity(worker.pid, host)

        async def polls() -> bool:
            assert worker.running, worker.output
            client = self.temporal_env.client
            return await worker_is_polling(client, "default", self.queue, identity)

        await wait_for(polls, timeout=STARTUP, what=f"the Worker on {host} to poll")
        self.workers[host], self.worker_metrics[host] = worker, f"http://{address}/metrics"
        return worker

    env_shared: dict[str, str] = field(default_factory=dict)
    bot: RefundBotProcess | None = None

    async def bot_ready(self) -> None:
        """Until the bot's /healthz answers 200 (Temporal reachable, Slack serving)."""

        async def healthy() -> bool:
            assert self.bot is not None and self.bot.running, self.bot and self.bot.output
            try:
                return (await get(self.http, self.ops_url + "/healthz"))[0] == 200
            except aiohttp.ClientConnectionError:
                return False

        await wait_for(healthy, timeout=STARTUP, what="the bot's /healthz to answer 200")

    async def send(self, delivery: Delivery) -> None:
        headers = signed_headers(SECRET, delivery)
        async with self.http.post(self.bot_url, data=delivery.body, headers=headers) as resp:
            assert resp.status == 200, await resp.text()

    async def command(self, command: str, text: str, user: tuple[str, str]) -> str:
        before = len(self.slack.responses)
        await self.send(SlackSender(self.slack).command(command, text, user=user[0], name=user[1]))
        await wait_for(
            lambda: len(self.slack.responses) > before, timeout=TURN, what=f"{command}'s answer"
        )
        return self.slack.responses[before]["text"]

    async def open(self, text: str) -> tuple[str, str]:
        delivery = SlackSender(self.slack).post(CHANNEL, text)
        await self.send(delivery)
        root = delivery.payload["event"]["ts"]
        self._openings[root] = delivery
        return root, f"slack-{TEAM}-{CHANNEL}-{root}"

    async def redeliver_opening(self, root: str) -> None:
        """The opening message again under a new event id: what a bot replica that did not take
        the first delivery sees (its own de-duplication cannot know it)."""
        event = self._openings[root].payload["event"]
        await self.send(SlackSender(self.slack).envelope(event))

    async def reply(self, root: str, text: str) -> None:
        await self.send(SlackSender(self.slack).post(CHANNEL, text, thread_ts=root))

    async def next_bot_message(self, root: str) -> dict[str, Any]:
        seen = self._seen.get(root, 0)

        def arrived() -> dict[str, Any] | None:
            ours = [m for m in self.slack.thread(CHANNEL, root) if m.get("bot_id")]
            return ours[seen] if len(ours) > seen else None

        message = await wait_for(arrived, timeout=TURN, what=f"agent message {seen + 1} in {root}")
        self._seen[root] = seen + 1
        return message

    async def approve(self, escalation: dict[str, Any]) -> None:
        click = SlackSender(self.slack).click(
            CHANNEL, escalation["ts"], APPROVE_ACTION_ID, user=SAM[0], name=SAM[1]
        )
        await self.send(click)

    async def authorized_by(self, workflow_id: str) -> list[str]:
        """The identities of the Workers that ran authorize_refund, from Event History: a
        regular Activity's started event names its Worker; a local activity's marker is written
        by the workflow task that ran it, whose completed event names the Worker."""
        handle = self.temporal_env.client.get_workflow_handle(workflow_id)
        events = {e.event_id: e for e in (await handle.fetch_history()).events}
        scheduled = {
            i: e.activity_task_scheduled_event_attributes.activity_type.name
            for i, e in events.items()
            if e.HasField("activity_task_scheduled_event_attributes")
        }
        identities = []
        for e in events.values():
            if e.HasField("activity_task_started_event_attributes"):
                started = e.activity_task_started_event_attributes
                if scheduled[started.scheduled_event_id] == "authorize_refund":
                    identities.append(started.identity)
            elif (marker := local_activity(e)) and marker["activity_type"] == "authorize_refund":
                task = events[e.marker_recorded_event_attributes.workflow_task_completed_event_id]
                identities.append(task.workflow_task_completed_event_attributes.identity)
        return identities


async def get(http: aiohttp.ClientSession, url: str) -> tuple[int, str]:
    async with http.get(url) as resp:
        return resp.status, await resp.text()


@asynccontextmanager
async def deployment(
    temporal_env: WorkflowEnvironment, shared: SharedDatabase, tmp: Path
) -> AsyncIterator[Deployment]:
    queue = f"multi-{uuid.uuid4().hex[:8]}"
    async with AsyncExitStack() as stack:
        slack = await stack.enter_async_context(FakeSlackApi(team_id=TEAM))
        http = await stack.enter_async_context(aiohttp.ClientSession())
        env = clean_environment(
            **TEST_CODEC_ENV,  # the deployment's keys, shared by every process
            TEMPORAL_ADDRESS=temporal_env.client.service_client.config.target_host,
            TEMPORAL_TASK_QUEUE=queue,
            TEMPORAL_CONTROL_TASK_QUEUE=f"{queue}-control",
            SLACK_BOT_TOKEN=slack.token,
            SLACK_API_URL=slack.url,
            REFUND_ADMINS=f"slack:{ADMIN[0]}",
            DEMO_CUSTOMER_FOR_NEW_USERS="cus_nyghtowl",  # a demo workspace
        )
        slack_port, ops = free_port(), f"127.0.0.1:{free_port()}"
        bot_env = {
            **env,
            "DATA_DIR": str(tmp / "bot-1"),
            **shared.env,
            "REFUND_BOT_HOST": "bot-1",
            "SLACK_SIGNING_SECRET": SECRET,
            "SLACK_SUPPORT_CHANNEL": CHANNEL,
            "SLACK_PORT": str(slack_port),
            "METRICS_ADDRESS": ops,
        }
        bot = await RefundBotProcess.start(["bot"], bot_env, tmp)
        stack.push_async_callback(bot.close)
        d = Deployment(
            temporal_env,
            slack,
            http,
            queue,
            f"http://127.0.0.1:{slack_port}/slack/events",
            f"http://{ops}",
            env,
            tmp,
            stack,
            env_shared=shared.env,
        )

        d.bot = bot
        yield d
        # Each process stops gracefully on SIGTERM, as systemd stops it; none leaves a child.
        running = [p for p in (bot, *d.workers.values()) if p.running]
        codes = await asyncio.gather(*(p.stop(signal.SIGTERM) for p in running))
        for process, code in zip(running, codes, strict=True):
            assert code == 0, process.output
        for process in (bot, *d.workers.values()):
            assert "Traceback" not in process.output, process.output


async def test_a_bot_and_two_workers_share_one_answer_and_survive_a_worker_sigkill(
    temporal_env: WorkflowEnvironment, shared_database: SharedDatabase, tmp_path: Path
) -> None:
    orders = [await shared_database.place_order(ESPRESSO) for _ in range(4)]
    async with deployment(temporal_env, shared_database, tmp_path) as d:
        # The bot and worker-a start side by side (a process's start-up is most of this test).
        worker_a, _ = await asyncio.gather(d.start_worker("worker-a"), d.bot_ready())
        status, body = await get(d.http, d.ops_url + "/healthz")
        assert status == 200 and '"slack": {"state": "connected"' in body

        # The grant, made through the bot: written to the database every Worker reads.
        granted = await d.command("/refund-grant", f"<@{SAM[0]}|{SAM[1]}> refund_approver", ADMIN)
        assert granted.startswith("Granted refund_approver to sam"), granted

        # Conversation 0 runs on worker-a alone, to its refund.
        first, first_id = await d.open(f"please refund order {orders[0].order_number}")
        assert (await d.next_bot_message(first))["text"] == "Was the package opened?"
        await d.reply(first, "Yes")
        assert (await d.next_bot_message(first))["text"] == "What was damaged?"
        await d.reply(first, "The handle snapped off")
        escalation = await d.next_bot_message(first)
        assert escalation["text"].startswith("This refund needs a support agent")
        await d.approve(escalation)
        assert (await d.next_bot_message(first))["text"].startswith("Your refund is complete")
        assert await d.authorized_by(first_id) == [worker_identity(worker_a.pid, "worker-a")]

        # worker-b joins; three more conversations, answered while both Workers serve.
        worker_b = await d.start_worker("worker-b")
        threads = [await d.open(f"please refund order {o.order_number}") for o in orders[1:]]
        for root, _ in threads:
            assert (await d.next_bot_message(root))["text"] == "Was the package opened?"
            await d.reply(root, "Yes")
        # A redelivered opening reaches Temporal (signal-with-start on the running conversation):
        # the Workflow drops the repeated message (no second question below); the bot counts
        # each opening it hands to Temporal, this one too (the metrics at the end).
        await d.redeliver_opening(threads[0][0])
        for root, _ in threads:
            assert (await d.next_bot_message(root))["text"] == "What was damaged?"
            await d.reply(root, "Split seam")
        # Mid-conversation (their lookups and escalations still to come): worker-a dies.
        worker_a.send(signal.SIGKILL)
        assert await worker_a.exit_code(timeout=10) == -signal.SIGKILL

        escalations = [await d.next_bot_message(root) for root, _ in threads]
        for escalation in escalations:
            assert escalation["text"].startswith("This refund needs a support agent")
            await d.approve(escalation)
        for root, _ in threads:
            assert (await d.next_bot_message(root))["text"].startswith("Your refund is complete")
        for _, workflow_id in threads:
            assert await d.authorized_by(workflow_id) == [worker_identity(worker_b.pid, "worker-b")]

        # Exactly one refund each, as the owner (the ledger) records them.
        for order, workflow_id in zip(orders, [first_id, *(w for _, w in threads)], strict=True):
            [refund] = await shared_database.refunds_for(workflow_id)
            assert (refund.order_number, refund.amount_cents, refund.calls) == (
                order.order_number,
                45000,
                1,
            )

        # What just happened, in the bot's and the surviving Worker's Prometheus metrics.
        status, bot_metrics = await get(d.http, d.ops_url + "/metrics")
        assert status == 200
        assert _value(bot_metrics, "refund_bot_conversations_opened_total", 'platform="slack"') == 5
        assert _value(bot_metrics, "refund_bot_platform_connected", 'platform="slack"') == 1
        assert _value(bot_metrics, "refund_bot_inbox_depth") == 0
        assert "temporal_request_total{" in bot_metrics  # the SDK's own, from the bot's client
        status, b_metrics = await get(d.http, d.worker_metrics["worker-b"])
        assert status == 200
        assert _value(b_metrics, "refund_bot_refunds_issued_total", 'owner="ledger"') == 3
        assert "temporal_activity_execution_latency" in b_metrics  # the SDK's Worker metrics


def _value(metrics: str, name: str, label: str = "") -> float:
    """The sum of `name`'s samples (with `label`, if given) in Prometheus text."""
    samples = [
        float(line.rsplit(" ", 1)[1])
        for line in metrics.splitlines()
        if line.startswith(name + "{") and label in line
    ]
    assert samples, f"no {name} {label} in:\n{metrics}"
    return sum(samples)
