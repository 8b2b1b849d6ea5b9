"""Traces of every refund-bot process: OpenTelemetry, set by the standard OTEL_* variables or off.

    configure(command) -> any OTEL_* set? -> TracerProvider -> only allowed content -> exporter
    span(name, **attributes) -> a span of the current trace; nothing at all while tracing is off

One trace per customer message in the bot: from the platform's handler to the router's Signal or
Update; the Worker's spans are in the conversation's trace (temporalio's TracingInterceptor), linked
from each Signal's and Update's. Off, `span` costs one test of a
global. A span holds only the attributes named in ATTRIBUTES (ids, stages, amounts, durations,
outcomes), never customer text, a name, a secret or an exception's message (`_Private`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Iterator, Mapping, MutableMapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
    from opentelemetry.trace import Tracer

    # _Private is a SpanExporter to the type checker; at run time the SDK is imported only when
    # tracing is on, so it subclasses object and is one by its methods.
    _ExporterBase = SpanExporter
else:
    _ExporterBase = object

log = logging.getLogger(__name__)

SERVICE_NAME = "refund-bot"
# OTEL_EXPORTER_OTLP_PROTOCOL values: the OTLP exporter this project ships speaks HTTP.
_HTTP_PROTOCOLS = frozenset({"http/protobuf", ""})

# The attributes a span may carry, by the keyword `span` takes: refund-bot's own (ids, stages,
# amounts, outcomes) and OpenTelemetry's semantic conventions for the calls they describe.
ATTRIBUTES: dict[str, str] = {
    "platform": "refund_bot.platform",
    "workflow_id": "refund_bot.workflow_id",
    "event_id": "refund_bot.event_id",
    "routed": "refund_bot.routed",
    "inbound": "refund_bot.inbound",
    "opens_thread": "refund_bot.opens_thread",
    "decision": "refund_bot.decision",
    "round": "refund_bot.round",
    "command": "refund_bot.command",
    "outcome": "refund_bot.outcome",
    "message_kind": "refund_bot.message_kind",
    "seq": "refund_bot.seq",
    "duplicate": "refund_bot.duplicate",
    "owner": "refund_bot.owner",
    "status": "refund_bot.status",
    "amount_cents": "refund_bot.amount_cents",
    "currency": "refund_bot.currency",
    "attempt": "refund_bot.attempt",
    "inbox_entry": "refund_bot.inbox_entry",
    "action": "refund_bot.action",
    "turn": "refund_bot.turn",
    "db_system": "db.system.name",
    "db_operation": "db.operation.name",
    "db_namespace": "db.namespace",
    "gen_ai_operation": "gen_ai.operation.name",
    "gen_ai_provider": "gen_ai.provider.name",
    "gen_ai_model": "gen_ai.request.model",
    "gen_ai_input_tokens": "gen_ai.usage.input_tokens",
    "gen_ai_output_tokens": "gen_ai.usage.output_tokens",
    "http_method": "http.request.method",
    "http_status": "http.response.status_code",
    "server_address": "server.address",
    "error_type": "error.type",
}
# What temporalio.contrib.opentelemetry puts on its spans: Temporal's ids.
_TEMPORAL_ATTRIBUTES = frozenset(
    {
        "temporalWorkflowID",
        "temporalRunID",
        "temporalActivityID",
        "temporalActivityType",
        "temporalUpdateID",
    }
)
ALLOWED_KEYS = frozenset(ATTRIBUTES.values()) | _TEMPORAL_ATTRIBUTES
AttributeValue = str | bool | int | float


class TracingRefused(Exception):
    """An OTEL_* setting refund-bot cannot honour; the message is one line naming it."""


_provider: TracerProvider | None = None
_tracer: Tracer | None = None
# opentelemetry.trace, imported by install(): nothing here imports lazily once spans are made,
# since a span can end inside a Workflow's sandbox, where an import would be a workflow's.
_api: Any = None
_sdk: Any = None  # opentelemetry.sdk.trace, imported by tracer_provider()


def enabled() -> bool:
    return _tracer is not None


# ------------------------------------------------------------------------------------------------
# Configuration: the standard OTEL_* variables
# ------------------------------------------------------------------------------------------------


def otel_environment(environ: Mapping[str, str], env_file: str | None = ".env") -> dict[str, str]:
    """The OTEL_* variables in force: the environment's, and a `.env` file's where the environment
    has none (like every other setting); empty values count as unset."""
    found = {k: v for k, v in environ.items() if k.startswith("OTEL_") and v.strip()}
    if env_file and os.path.isfile(env_file):
        from dotenv import dotenv_values

        for key, value in dotenv_values(env_file).items():
            if key.startswith("OTEL_") and value and key not in found:
                found[key] = value
    return found


def wanted(otel: Mapping[str, str]) -> bool:
    """Whether these OTEL_* variables turn tracing on: any one set does, unless tracing is
    turned off by the SDK's own switch or an exporter of `none`."""
    if otel.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    return bool(otel) and _exporter_names(otel) != ["none"]


def _exporter_names(otel: Mapping[str, str]) -> list[str]:
    names = otel.get("OTEL_TRACES_EXPORTER", "otlp")  # the specification's default
    return [n.strip().lower() for n in names.split(",") if n.strip()]


def exporters(otel: Mapping[str, str]) -> list[SpanExporter]:
    """The exporters OTEL_TRACES_EXPORTER names: otlp (OTLP over HTTP, the endpoint, headers and
    timeout read by the exporter from OTEL_EXPORTER_OTLP_*), console (stderr), or none."""
    found: list[SpanExporter] = []
    for name in _exporter_names(otel):
        if name == "otlp":
            protocol = otel.get(
                "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", otel.get("OTEL_EXPORTER_OTLP_PROTOCOL", "")
            ).strip()
            if protocol not in _HTTP_PROTOCOLS:
                raise TracingRefused(
                    f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol}: refund-bot exports OTLP over HTTP; "
                    "set it to http/protobuf and point OTEL_EXPORTER_OTLP_ENDPOINT at the "
                    "collector's HTTP port (4318)"
                )
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            found.append(OTLPSpanExporter())
        elif name == "console":
            from opentelemetry.sdk.trace.export import ConsoleSpanExporter

            # stderr: `refund-bot run`'s stdout is the terminal channel.
            found.append(ConsoleSpanExporter(out=sys.stderr))
        elif name != "none":
            raise TracingRefused(
                f"OTEL_TRACES_EXPORTER={otel['OTEL_TRACES_EXPORTER']}: refund-bot exports spans "
                "with otlp (OTLP over HTTP), console or none"
            )
    return found


def configure(command: str, environ: MutableMapping[str, str] | None = None) -> bool:
    """Trace this process if the OTEL_* variables ask for it: its service is OTEL_SERVICE_NAME
    (default refund-bot), `refund_bot.command` says which command it runs. Returns whether on.

    The OTEL_* variables read from `.env` are put in this process's environment, so the SDK's
    own readers (the exporter's endpoint, the sampler) and the Worker children see them too.
    """
    environ = os.environ if environ is None else environ
    otel = otel_environment(environ)
    if not wanted(otel):
        return False
    for key, value in otel.items():
        environ.setdefault(key, value)
    chosen = exporters(otel)
    from opentelemetry.sdk.resources import Resource

    attributes: dict[str, AttributeValue] = {"refund_bot.command": command}
    if "OTEL_SERVICE_NAME" not in otel and "service.name=" not in otel.get(
        "OTEL_RESOURCE_ATTRIBUTES", ""
    ):
        attributes["service.name"] = SERVICE_NAME
    # Resource.create reads OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME; the provider reads
    # OTEL_TRACES_SAMPLER and its argument; the batch processor reads OTEL_BSP_*.
    install(tracer_provider(chosen, resource=Resource.create(attributes)))
    correlate_logs()
    return True


def tracer_provider(
    exporters: Sequence[SpanExporter], *, resource: Any = None, batch: bool = True
) -> TracerProvider:
    """A provider whose spans reach `exporters` through the privacy filter; batched in a thread
    of the SDK's, so a slow collector never holds a turn (`batch=False`: at each span's end)."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

    global _sdk
    import opentelemetry.sdk.trace as sdk_trace

    _sdk = sdk_trace
    provider = TracerProvider(resource=resource) if resource is not None else TracerProvider()
    for exporter in exporters:
        private = _Private(exporter)
        provider.add_span_processor(
            BatchSpanProcessor(private) if batch else SimpleSpanProcessor(private)
        )
    return provider


def install(provider: TracerProvider) -> None:
    """Make `provider` this process's (OpenTelemetry allows one per process) and turn spans on."""
    global _provider, _tracer, _api
    from opentelemetry import trace

    trace.set_tracer_provider(provider)
    _api, _provider = trace, provider
    _tracer = trace.get_tracer("refund_bot")


def flush(timeout_millis: int = 2000) -> None:
    """Export what is waiting (a process about to end: worker.exit calls this). Bounded: a
    collector that does not answer costs a stop two seconds, never the stop itself."""
    if _provider is not None:
        with contextlib.suppress(Exception):
            _provider.force_flush(timeout_millis)


def interceptors() -> list[Any]:
    """For Client.connect: the Temporal interceptor that carries traces, when tracing is on. A
    Worker built on that client gets it too (the SDK passes a client's interceptors on)."""
    if not enabled():
        return []
    # Imported here: the SDK's OpenTelemetry package takes 0.2 s to import.
    from temporalio.contrib.opentelemetry import TracingInterceptor

    return [TracingInterceptor()]


# ------------------------------------------------------------------------------------------------
# Spans
# ------------------------------------------------------------------------------------------------


class Span:
    """What a `span` block may do with its span: add allowed attributes (a no-op when off)."""

    __slots__ = ("_span",)

    def __init__(self, span: Any = None) -> None:
        self._span = span

    def set(self, **attributes: AttributeValue | None) -> None:
        named = _named(attributes)
        if self._span is not None and named:
            self._span.set_attributes(named)


_NO_SPAN = Span()


def _named(attributes: Mapping[str, AttributeValue | None]) -> dict[str, AttributeValue]:
    # Checked whether tracing is on or off, so that a new attribute is refused in every test.
    named = {}
    for key, value in attributes.items():
        if key not in ATTRIBUTES:
            raise TypeError(f"span attribute {key!r} is not one of agent.tracing.ATTRIBUTES")
        if value is not None:
            named[ATTRIBUTES[key]] = value
    return named


@contextlib.contextmanager
def span(name: str, kind: str = "internal", **attributes: AttributeValue | None) -> Iterator[Span]:
    """A span named `name` (low cardinality: `slack.message`, `chat.post`, `SELECT grants`) in
    the current trace, its `kind` one of internal, server, client, consumer, producer. An
    exception that escapes marks it failed with the exception's type, never its text."""
    named = _named(attributes)
    tracer = _tracer
    if tracer is None:
        yield _NO_SPAN
        return
    with tracer.start_as_current_span(
        name,
        kind=_api.SpanKind[kind.upper()],
        attributes=named,
        record_exception=False,
        set_status_on_exception=False,
    ) as current:
        try:
            yield Span(current)
        except Exception as err:  # a cancellation is not a failure of the work
            _failed(current, err)
            raise


def _failed(current: Any, err: BaseException) -> None:
    kind = type(err).__name__
    current.set_attribute("error.type", kind)
    current.set_status(_api.Status(_api.StatusCode.ERROR, kind))


# ------------------------------------------------------------------------------------------------
# What leaves the process
# ------------------------------------------------------------------------------------------------


class _Private(_ExporterBase):
    """A SpanExporter in front of the real one: each span leaves with the allowed attributes only,
    its events' exception messages and stack traces dropped, and its status description cut to
    the error's type. Whatever code made the span (refund-bot's, the SDK interceptor's)."""

    def __init__(self, exporter: SpanExporter) -> None:
        self._exporter = exporter

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return self._exporter.export([private_copy(s) for s in spans])

    def shutdown(self) -> None:
        self._exporter.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._exporter.force_flush(timeout_millis)


def private_copy(span: ReadableSpan) -> ReadableSpan:
    status = span.status
    if status.description:
        status = _api.Status(status.status_code, status.description.split(":", 1)[0].strip())
    events = [
        _sdk.Event(
            event.name,
            {k: v for k, v in (event.attributes or {}).items() if k == "exception.type"},
            event.timestamp,
        )
        for event in span.events
    ]
    return _sdk.ReadableSpan(
        name=span.name,
        context=span.context,
        parent=span.parent,
        resource=span.resource,
        attributes={k: v for k, v in (span.attributes or {}).items() if k in ALLOWED_KEYS},
        events=events,
        links=span.links,
        kind=span.kind,
        status=status,
        start_time=span.start_time,
        end_time=span.end_time,
        instrumentation_scope=span.instrumentation_scope,
    )


# ------------------------------------------------------------------------------------------------
# Log lines
# ------------------------------------------------------------------------------------------------

# The names OpenTelemetry's logging instrumentation gives the same fields.
LOG_FORMAT_SUFFIX = "%(otelTrace)s"


def correlate_logs() -> None:
    """Every log record made from now on carries otelTraceID, otelSpanID and otelTrace (the
    suffix the CLI's format appends: empty outside a span). Inside a Workflow and its steps
    the current span is the conversation's (the SDK's interceptor), so their lines name the
    conversation's trace."""
    previous = logging.getLogRecordFactory()
    if getattr(previous, "_refund_bot_traced", False):
        return
    from opentelemetry import trace

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        context = trace.get_current_span().get_span_context()
        if context.is_valid:
            trace_id, span_id = f"{context.trace_id:032x}", f"{context.span_id:016x}"
            record.otelTraceID, record.otelSpanID = trace_id, span_id
            record.otelTrace = f" trace_id={trace_id} span_id={span_id}"
        else:
            record.otelTraceID = record.otelSpanID = "0"
            record.otelTrace = ""
        return record

    # A mark on the function itself, which the next call reads from whichever factory is set.
    factory._refund_bot_traced = True  # type: ignore[attr-defined]
    logging.setLogRecordFactory(factory)
