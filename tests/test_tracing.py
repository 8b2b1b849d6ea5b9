"""Tracing: one conversation on the local channel, its spans read from an in-memory exporter.

    terminal line / click / command -> router -> Signal -> Worker (in process) -> Activities
        -> every span through agent.tracing's privacy filter -> InMemorySpanExporter

A trace per customer message and click in the bot, from the terminal's event to its Signal or
Update; the opening message's trace is the conversation's (the SDK's interceptor: every Worker span
under the start), and its HandleSignal and HandleUpdate spans link to each later message's and
click's. No attribute of any span holds customer text; a log line carries its trace's id.
With no OTEL_* variable set, nothing is installed at all.
"""

from __future__ import annotations

import io
import logging
import os
import random
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from temporalio.testing import WorkflowEnvironment

from agent import tracing
from agent.settings import AgentSettings, TemporalSettings
from agent.stores.databases import database_for
from agent.stores.grants import GrantStore
from agent.temporal_client import connect
from bot.conversations import ConversationRouter
from bot.ids import workflow_id_for
from bot.inbox import Inbox
from bot.local import thread_store
from bot.local.terminal import PEOPLE, LocalChannel, thread_ref
from bot.local.thread_store import LocalThreadStore
from harness import free_port
from harness.cli_process import clean_environment
from harness.codec import TEST_KEYS
from harness.conditions import wait_for
from harness.inproc import running_worker
from tests.support.slack_app import RecordingCommands
from tests.support.terminal import Terminal

ROOTS = ("local.message", "local.click", "local.command")
# What the customer and the agent say, and who they are: none of it may be in a span.
PRIVATE = (
    "refund order 4500",
    "Split seam",
    "Was the package opened?",
    "What was damaged?",
    "espresso machine",
    "Nyghtowl",
    "Sam (support agent)",
    "needs a support agent",
)


@pytest.fixture(scope="module")
def exporter() -> Iterator[InMemorySpanExporter]:
    """Tracing on in this process, into memory (at each span's end), for this module only."""
    memory = InMemorySpanExporter()
    factory = logging.getLogRecordFactory()
    tracing.install(tracing.tracer_provider([memory], batch=False))
    tracing.correlate_logs()
    try:
        yield memory
    finally:
        tracing._tracer = None  # the next modules run as a process without OTEL_* does
        logging.setLogRecordFactory(factory)


def traces(spans: tuple[ReadableSpan, ...]) -> dict[int, list[ReadableSpan]]:
    found: dict[int, list[ReadableSpan]] = {}
    for span in spans:
        found.setdefault(span.context.trace_id, []).append(span)
    return found


def root_of(trace: list[ReadableSpan]) -> ReadableSpan:
    ids = {s.context.span_id for s in trace}
    roots = [s for s in trace if s.parent is None or s.parent.span_id not in ids]
    assert len(roots) == 1, f"not one connected tree: {[s.name for s in roots]}"
    return roots[0]


def children(trace: list[ReadableSpan], parent: ReadableSpan) -> list[str]:
    return [
        s.name for s in trace if s.parent is not None and s.parent.span_id == parent.context.span_id
    ]


def named(trace: list[ReadableSpan], name: str) -> list[ReadableSpan]:
    return [s for s in trace if s.name == name]


def attributes(span: ReadableSpan) -> Mapping[str, Any]:
    """A finished span's attributes: the SDK gives every finished span its mapping."""
    assert span.attributes is not None
    return span.attributes


def started(span: ReadableSpan) -> int:
    """A finished span's start, in nanoseconds: every finished span was started."""
    assert span.start_time is not None
    return span.start_time


def everything_said(span: ReadableSpan) -> list[str]:
    """Every value a span carries out of the process: attributes, events, status, links."""
    said = [str(v) for v in (span.attributes or {}).values()]
    said += [str(v) for e in span.events for v in (e.attributes or {}).values()]
    said += [span.status.description or "", span.name]
    said += [str(v) for link in span.links for v in (link.attributes or {}).values()]
    return said


async def test_a_conversation_on_the_local_channel_is_one_trace_linked_from_each_message_and_click(
    exporter: InMemorySpanExporter,
    temporal_env: WorkflowEnvironment,
    agent_settings: AgentSettings,
    caplog: pytest.LogCaptureFixture,
) -> None:
    exporter.clear()
    caplog.set_level(logging.INFO)
    address = temporal_env.client.service_client.config.target_host
    client = await connect(TemporalSettings(_env_file=None, address=address), keys=TEST_KEYS)
    assert [type(i).__name__ for i in client.config()["interceptors"]] == ["TracingInterceptor"]
    database = database_for(agent_settings)
    threads = LocalThreadStore(database)
    # Threads are named t1, t2, … per data directory, and Workflow IDs after them: a thread name
    # of its own, so no other test's conversation on the session's server has this one's ID.
    async with database.connect(thread_store.SCHEMA) as db:
        await db.execute(
            "INSERT INTO threads (thread_id, channel, opened_by, opened_at) VALUES (?, ?, ?, ?)",
            f"t{random.randrange(10**6, 10**9)}",
            "support",
            "nobody",
            "2026-01-01",
        )

    async def hold() -> bool:
        return False

    async with running_worker(client, agent_settings, threads) as task_queue:
        router = ConversationRouter(client, task_queue, Inbox(database), hold)
        out = io.StringIO()
        channel = LocalChannel(
            threads, router, RecordingCommands(), out=out, grants=GrantStore(database)
        )

        async def the_agent_says(count: int) -> None:
            async def posts() -> bool:
                said = len([m for m in await threads.messages() if m.author_is_bot])
                # The terminal's own tail (it learns the round), after the count: every post
                # counted is on the terminal too.
                await channel.show_new()
                return said >= count

            await wait_for(posts, what=f"the agent's post number {count}")

        await channel.handle("refund order 4500")
        await the_agent_says(1)  # Was the package opened?
        await channel.handle("Yes")
        await the_agent_says(2)  # What was damaged?
        await channel.handle("Split seam")
        await the_agent_says(3)  # the escalation, with its Approve and Deny
        channel.me = PEOPLE["support"]
        await channel.handle("1")  # Approve
        await the_agent_says(4)  # the refund is complete
        assert channel.thread is not None
        conversation = client.get_workflow_handle(workflow_id_for(thread_ref(channel.thread)))
        assert (await conversation.result())["status"] == "refunded"  # its last steps done too
        channel.me = PEOPLE["presenter"]
        await channel.handle(f"/refund-status {channel.thread}")

    assert "Your refund is complete" in out.getvalue()
    spans = exporter.get_finished_spans()
    by_root: dict[str, list[tuple[ReadableSpan, list[ReadableSpan]]]] = {}
    for trace in traces(spans).values():
        root = root_of(trace)
        if root.name in ROOTS:
            by_root.setdefault(root.name, []).append((root, trace))
    assert [len(by_root.get(name, [])) for name in ROOTS] == [3, 1, 1]

    (opening, whole), (_, yes_trace), (_, seam_trace) = sorted(
        by_root["local.message"], key=lambda found: started(found[0])
    )
    # The opening message: the router starts the conversation with signal-with-start, and that
    # call's span is the parent of every Worker span of the conversation (the SDK's interceptor):
    # the opening message's trace is the conversation's.
    # The terminal keeps the message in its thread store (its SQL), writes it ahead to the
    # inbox, then routes it.
    first = children(whole, opening)
    assert first[-2:] == ["router.keep", "router.route"]
    assert {"INSERT threads", "SELECT threads"} >= set(first[:-2])
    assert children(whole, named(whole, "router.keep")[0]) == ["INSERT inbox"]
    route = named(whole, "router.route")[0]
    assert attributes(route)["refund_bot.routed"] == "started"
    # Whether the inbox holds anything earlier of this conversation (order), the Signal, then
    # the message written ahead is done with.
    assert children(whole, route) == [
        "SELECT inbox",
        "SignalWithStartWorkflow:RefundConversation",
        "DELETE inbox",
    ]
    (start,) = named(whole, "SignalWithStartWorkflow:RefundConversation")
    assert {"RunWorkflow:RefundConversation", "HandleSignal:customer_message"} <= set(
        children(whole, start)
    )
    assert [attributes(p)["refund_bot.message_kind"] for p in named(whole, "chat.post")] == [
        "question",
        "question",
        "escalation",
        "outcome",
    ]
    for post in named(whole, "chat.post"):
        assert set(children(whole, post)) == {"INSERT threads"}
    # The first question is posted by the decide step that asks it, after the lookups.
    assert named(whole, "RunActivity:lookup_order")
    assert named(whole, "SELECT domain")
    assert attributes(named(whole, "chat.post")[2])["refund_bot.round"] == 1

    def linked_from(client_span: ReadableSpan) -> list[str]:
        """The conversation's spans that link to a message's or click's call to Temporal."""
        return [
            s.name
            for s in whole
            if any(link.context.span_id == client_span.context.span_id for link in s.links)
        ]

    # Each answer: its own trace, from the terminal to the Update; the conversation's
    # HandleUpdate links to it.
    for trace in (yes_trace, seam_trace):
        route = named(trace, "router.route")[0]
        assert attributes(route)["refund_bot.routed"] == "signalled"
        (update,) = named(trace, "StartWorkflowUpdate:customer_message_update")
        assert linked_from(update) == ["HandleUpdate:customer_message_update"]
        assert not named(trace, "RunActivity:decide_next_step")

    # The click: its trace reaches the approval Signal, which the conversation's HandleSignal
    # links to; there, the live grant read, the refund, the outcome, the edit.
    ((click, click_trace),) = by_root["local.click"]
    assert attributes(click)["refund_bot.decision"] == "approve"
    assert attributes(click)["refund_bot.round"] == 1
    assert attributes(click)["refund_bot.outcome"] == "signalled"
    (approval,) = named(click_trace, "SignalWorkflow:approval")
    assert linked_from(approval) == ["HandleSignal:approval"]
    for name in (
        "RunActivity:authorize_refund",
        "RunActivity:issue_refund",
        "chat.edit",
        "CompleteWorkflow:RefundConversation",
    ):
        assert named(whole, name), f"{name} missing from the conversation's trace"
    (refund,) = named(whole, "refund.ledger")
    assert attributes(refund)["refund_bot.amount_cents"] == 45000
    assert attributes(refund)["refund_bot.status"] == "succeeded"

    ((command, _),) = by_root["local.command"]
    assert attributes(command)["refund_bot.command"] == "/refund-status"

    # No span, of any trace (the thread store's polling included), holds customer text.
    for span in spans:
        said = " ".join(everything_said(span))
        leaked = [text for text in PRIVATE if text in said]
        assert not leaked, f"{span.name} carries {leaked}"
        assert set(span.attributes or {}) <= tracing.ALLOWED_KEYS

    # A log line names its trace: the Worker's (the Activities' and the Workflow's) the
    # conversation's, the router's in the bot the click's.
    def trace_ids(fragment: str) -> set[str]:
        # Set by agent.tracing's record factory; logging's formatters read it from __dict__ too.
        return {r.__dict__["otelTraceID"] for r in caplog.records if fragment in r.getMessage()}

    conversation_id = f"{opening.context.trace_id:032x}"
    assert trace_ids("MEMORY COPY | lookup_order") == {conversation_id}
    assert conversation_id in trace_ids("RULES |")
    assert trace_ids("EXTERNAL EFFECT | issue_refund") == {conversation_id}
    assert trace_ids("local click") == {f"{click.context.trace_id:032x}"}


async def test_a_span_refuses_an_attribute_it_does_not_know_and_keeps_no_error_text(
    exporter: InMemorySpanExporter,
) -> None:
    exporter.clear()
    with pytest.raises(TypeError, match="'text' is not one"), tracing.span("chat.post", text=""):
        pass
    with pytest.raises(ValueError), tracing.span("chat.post", platform="local"):
        raise ValueError("the customer wrote: my card is 4242")
    (failed,) = exporter.get_finished_spans()
    assert failed.status.description == "ValueError"
    assert attributes(failed)["error.type"] == "ValueError"
    assert "4242" not in " ".join(everything_said(failed))


def test_a_span_made_elsewhere_leaves_with_allowed_attributes_only() -> None:
    from opentelemetry.sdk.trace import Event
    from opentelemetry.trace import Status, StatusCode

    span = ReadableSpan(
        "RunActivity:post_to_thread",
        attributes={"temporalWorkflowID": "local-local-support-t1", "message.text": "Split seam"},
        events=[
            Event("exception", {"exception.type": "ApplicationError", "exception.message": "Yes"})
        ],
        status=Status(StatusCode.ERROR, "ApplicationError: Split seam"),
    )
    kept = tracing.private_copy(span)
    assert dict(kept.attributes or {}) == {"temporalWorkflowID": "local-local-support-t1"}
    assert [dict(e.attributes or {}) for e in kept.events] == [
        {"exception.type": "ApplicationError"}
    ]
    assert kept.status.description == "ApplicationError"


def _python(code: str, **env: str) -> str:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    done = subprocess.run(
        [sys.executable, "-c", code],
        env={**clean, **env},
        cwd=Path(__file__).parent,  # no .env of a developer's here
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout.strip()


def test_without_otel_variables_nothing_is_installed_or_imported() -> None:
    out = _python(
        "import sys\n"
        "from agent import tracing\n"
        "import refund_bot.cli, bot.conversations, worker.runner, agent.temporal_client\n"
        "print(tracing.configure('run'), tracing.enabled(), tracing.interceptors(),\n"
        "      sorted(m for m in sys.modules if m.startswith('opentelemetry.sdk')))\n"
    )
    assert out == "False False [] []"


def test_the_otel_variables_choose_exporter_service_and_sampler() -> None:
    code = (
        "from opentelemetry import trace\n"
        "from agent import tracing\n"
        "print(tracing.configure('worker'))\n"
        "provider = trace.get_tracer_provider()\n"
        "resource = provider.resource.attributes\n"
        "print(resource['service.name'], resource['refund_bot.command'],\n"
        "      provider.sampler.get_description())\n"
        "exporter = provider._active_span_processor._span_processors[0].span_exporter._exporter\n"
        "print(type(exporter).__name__, exporter._endpoint)\n"
    )
    out = _python(
        code,
        OTEL_EXPORTER_OTLP_ENDPOINT="http://collector.internal:4318",
        OTEL_TRACES_SAMPLER="traceidratio",
        OTEL_TRACES_SAMPLER_ARG="0.25",
    ).splitlines()
    assert out[0] == "True"
    assert out[1].startswith("refund-bot worker TraceIdRatioBased{0.25}")
    assert out[2] == "OTLPSpanExporter http://collector.internal:4318/v1/traces"
    named = _python(code.replace("print(type", "#"), OTEL_SERVICE_NAME="refund-bot-eu").split()
    assert named[:2] == ["True", "refund-bot-eu"]
    assert _python("from agent import tracing; print(tracing.configure('bot'))",
                   OTEL_TRACES_EXPORTER="none") == "False"  # fmt: skip


def test_an_otlp_protocol_it_cannot_speak_is_one_line(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    done = subprocess.run(
        [sys.executable, "-m", "refund_bot", "status", "local-local-support-t1"],
        env={**env, "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "refund-bot: OTEL_EXPORTER_OTLP_PROTOCOL=grpc: refund-bot exports OTLP over HTTP; set it "
        "to http/protobuf and point OTEL_EXPORTER_OTLP_ENDPOINT at the collector's HTTP port "
        "(4318)"
    ]


class OtlpSink:
    """An OTLP/HTTP collector on loopback, in a thread: it keeps every span sent to /v1/traces,
    with its process's resource attributes."""

    def __init__(self) -> None:
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
        )

        self.spans: list[dict[str, Any]] = []
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                request = ExportTraceServiceRequest.FromString(body)
                for resource in request.resource_spans:
                    process = {a.key: a.value.string_value for a in resource.resource.attributes}
                    for scope in resource.scope_spans:
                        for span in scope.spans:
                            sink.spans.append(
                                {
                                    "name": span.name,
                                    "trace": span.trace_id.hex(),
                                    "id": span.span_id.hex(),
                                    "parent": span.parent_span_id.hex(),
                                    "command": process.get("refund_bot.command"),
                                    "service": process.get("service.name"),
                                }
                            )
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()


def test_refund_bot_run_sends_the_conversations_trace_from_the_bot_and_its_worker(
    tmp_path: Path,
) -> None:
    """The real thing: `refund-bot run` in a terminal, its Worker in a process of its own, both
    configured by OTEL_* alone, both exporting to one collector."""
    sink = OtlpSink()
    env = {
        **clean_environment(),
        "DATA_DIR": str(tmp_path / ".data"),
        "TEMPORAL_ADDRESS": f"127.0.0.1:{free_port()}",
        "TEMPORAL_UI_PORT": str(free_port()),
        "OTEL_EXPORTER_OTLP_ENDPOINT": sink.endpoint,
        "OTEL_BSP_SCHEDULE_DELAY": "200",
    }
    term = Terminal([sys.executable, "-m", "refund_bot", "run"], env, str(tmp_path))
    try:
        term.expect(r"Try: please refund order 1234")
        term.type("please refund order 1234")
        term.expect(r"\[t1\] refund-bot: Was the package opened\?")
        term.type("Yes")
        term.expect(r"\[t1\] refund-bot: What was damaged\?")
        term.type("Split seam")
        term.expect(r"\[t1\] refund-bot: Your refund is complete")

        def three_message_traces() -> dict[str, list[dict[str, Any]]] | None:
            by_trace: dict[str, list[dict[str, Any]]] = {}
            for span in list(sink.spans):
                by_trace.setdefault(span["trace"], []).append(span)
            found = {
                t: spans
                for t, spans in by_trace.items()
                if any(s["name"] == "local.message" for s in spans)
                and any(s["name"] == "router.route" for s in spans)
            }
            # The conversation's trace is whole once its last post is in.
            posts = [s for spans in found.values() for s in spans if s["name"] == "chat.post"]
            return found if len(found) == 3 and len(posts) == 3 else None

        deadline = time.monotonic() + 30
        while (found := three_message_traces()) is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert found is not None, (
            f"{len(sink.spans)} spans: {sorted({s['name'] for s in sink.spans})}"
        )
        commands = []
        for spans in found.values():
            ids = {s["id"] for s in spans}
            roots = [s for s in spans if s["parent"] not in ids]
            assert [r["name"] for r in roots] == ["local.message"]  # one tree
            assert {s["service"] for s in spans} == {"refund-bot"}
            commands.append({s["command"] for s in spans})
        # The opening message's trace is the conversation's: made by the bot (`refund-bot run`)
        # and by its Worker child; each answer's ends at its Update, in the bot.
        assert sorted(commands, key=len) == [{"run"}, {"run"}, {"run", "worker"}]
        term.type("/quit")
        assert term.proc.wait(timeout=30) == 0
    finally:
        term.close()
        sink.close()
