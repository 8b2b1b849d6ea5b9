"""`refund-bot worker`: the Temporal Workers for the refund conversations (worker.pair).

It runs in its own process so that it can really die (the supervisor restarts it). The chat
platforms' outbound halves and any platform grant sources arrive by injection: this module knows
the agent's Activities, not Slack or Discord.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any

from temporalio.client import Client
from temporalio.runtime import Runtime
from temporalio.worker import Interceptor, Worker

from agent.activities.authorize import AuthorizeActivities, GrantSource
from agent.activities.decide import DecideActivities
from agent.activities.lookups import LookupActivities
from agent.activities.metrics import DESCRIPTIONS
from agent.activities.notify import NotifyActivities, ThreadPoster
from agent.activities.refund import RefundActivities
from agent.activities.rules import apply_refund_rules
from agent.effect_owner import effect_owner
from agent.settings import AgentSettings, TemporalSettings
from agent.stores import domain as domain_store
from agent.stores import grants as grants_store
from agent.stores import ledger as ledger_store
from agent.stores.databases import database_for
from agent.stores.domain import DomainStore, demo_refunds
from agent.stores.grants import GrantStore
from agent.stores.ledger import Ledger
from agent.versions import unsupported_conversations, unsupported_line
from agent.workflow import WORKFLOW_TYPE, RefundConversation
from worker.bytecode import keep_bytecode
from worker.control import reset_sticky_queues, worker_identity
from worker.conversation_metrics import (
    ENDED_DESCRIPTION,
    ENDED_METRIC,
    ENDED_OUTCOMES,
    ConversationMetrics,
)
from worker.pair import WorkerPair
from worker.pollers import gone_here
from worker.settings import DEFAULT_CACHED_CONVERSATIONS, DEFAULT_STICKY_TIMEOUT
from worker.telemetry import PREFIX, metric_meter

log = logging.getLogger(__name__)

# The sticky timeout (WORKER_STICKY_TIMEOUT, worker.settings) is the SDK's 10 s by default. A
# dead Worker's conversations are reset (ResetStickyTaskQueue) by its supervisor, or (no
# supervisor) by its successor on the host as it starts, so it bounds only a reply queued before
# that reset, or a death nobody follows up (its host lost with it, or no successor started).
# Shorter is worse under load: with 2 s, a live Worker busy replaying a dead one's conversations
# let 76 of its own 100 time out to the other Worker, each replayed there (200 held
# conversations: 13.5 s against 11.3 s, bench.recovery --held 200 --workers 2).

# Workflow tasks this Worker works on at once (the SDK's default is 100). They share one
# interpreter: a task that replays a conversation (each one, on a Worker that has just taken over)
# costs tens of milliseconds of Python, so 100 of them at once each take seconds, pass the 10 s
# workflow task timeout together, are thrown away and replayed again: 200 held conversations
# released after a crash took 83-106 s with 100, 25-41 s with 5 to 20 (bench.recovery
# --held 200). A task also holds its slot while its local activities run (the decide step, the
# lookups, the post), so too few slots leave the Worker waiting: with 10, 1,000 conversations ran
# at 4.69 a second with the Worker using half a core; with 20, 6.87 a second. Too many bring the
# storm back under repeated kills: with 30, 39 of 200 conversations did not finish in
# bench.random_kills, against none with 10 or 20.
MAX_CONCURRENT_WORKFLOW_TASKS = 20

# What Activities in flight get to finish when the Worker is told to stop (SIGTERM).
GRACEFUL_SHUTDOWN = timedelta(seconds=5)

STANDBY_DESCRIPTION = (
    "1 while this Worker process is a warm standby, ready to poll the moment it is promoted"
)


async def prepare_stores(settings: AgentSettings) -> tuple[DomainStore, GrantStore, Ledger]:
    """Migrate and seed the agent's stores (idempotent, and safe from several processes at once),
    so a fresh database tells the whole story."""
    database = database_for(settings)
    await database.migrate(domain_store.SCHEMA, grants_store.SCHEMA, ledger_store.SCHEMA)
    domain = DomainStore(database, settings.demo_customer_for)
    grants = GrantStore(database)
    ledger = Ledger(database)
    await domain.seed()
    await grants.seed(
        tuple((admin, role, None) for admin in settings.admins for role in ("presenter", "admin"))
    )
    await ledger.seed_payments(await domain.payments())
    await ledger.seed_refunds(demo_refunds())
    return domain, grants, ledger


async def build_worker(
    client: Client,
    task_queue: str,
    settings: AgentSettings,
    posters: Mapping[str, ThreadPoster],
    grant_sources: Mapping[str, GrantSource] | None = None,
    *,
    host: str | None = None,
    interceptors: Sequence[Interceptor] = (),
    cached_conversations: int = DEFAULT_CACHED_CONVERSATIONS,
    sticky_timeout: timedelta = DEFAULT_STICKY_TIMEOUT,
) -> WorkerPair:
    """`host`: the name in this Worker's identity (REFUND_BOT_HOST; default the hostname).
    `cached_conversations`, `sticky_timeout`: WORKER_CACHED_CONVERSATIONS and
    WORKER_STICKY_TIMEOUT (worker.settings).
    `interceptors`: the composition root's own (the crash drill's pause, demo/drill.py)."""
    keep_bytecode(RefundConversation)
    domain, grants, ledger = await prepare_stores(settings)
    _counters_at_zero(client, task_queue, settings, posters)
    lookups = LookupActivities(domain, effect_owner(settings, ledger))
    notify = NotifyActivities(posters)
    activities: list[Callable[..., Any]] = [
        DecideActivities(settings, notify.post_to_thread).decide_next_step,
        lookups.lookup_order,
        lookups.lookup_customer_history,
        lookups.check_refund_policy,
        apply_refund_rules,
        AuthorizeActivities(grants, grant_sources).authorize_refund,
        RefundActivities(settings, ledger).issue_refund,
        notify.post_to_thread,
        notify.edit_thread_message,
    ]
    identity = worker_identity(host=host)
    # Turn latency and conversations ended (metrics), then the composition root's own; tracing,
    # when on, comes from the client. Both Workers: a post's retry runs on `effects`.
    intercepting = [ConversationMetrics(), *interceptors]
    conversations = Worker(
        client,
        task_queue=task_queue,
        identity=identity,
        workflows=[RefundConversation],
        # Registered here for the local steps; their regular attempts go to `effects` (worker.pair).
        activities=activities,
        no_remote_activities=True,
        interceptors=intercepting,
        sticky_queue_schedule_to_start_timeout=sticky_timeout,
        max_concurrent_workflow_tasks=MAX_CONCURRENT_WORKFLOW_TASKS,
        max_cached_workflows=cached_conversations,
        graceful_shutdown_timeout=GRACEFUL_SHUTDOWN,
    )
    effects = Worker(
        client,
        task_queue=task_queue,
        identity=identity,
        activities=activities,
        interceptors=intercepting,
        graceful_shutdown_timeout=GRACEFUL_SHUTDOWN,
    )
    return WorkerPair(conversations, effects)


def _counters_at_zero(
    client: Client, task_queue: str, settings: AgentSettings, posters: Mapping[str, ThreadPoster]
) -> None:
    """refund-bot's counters at 0 from this Worker's start, with the labels the SDK gives them
    when they count: a series that first appears at 1 hides that 1 from rate() and increase(),
    and an alert on it would never fire (Prometheus' own advice: export 0 for what can happen)."""
    meter = (client.service_client.config.runtime or Runtime.default()).metric_meter
    where = {"namespace": client.namespace, "task_queue": task_queue}
    owner = "stripe" if settings.stripe_api_key is not None else "ledger"

    def zero(name: str, description: str, labels: dict[str, str]) -> None:
        meter.create_counter(PREFIX + name, description).add(0, {**where, **labels})

    for name, activity, labels in (
        ("refunds_issued", "issue_refund", {"owner": owner}),
        ("refund_errors", "issue_refund", {"owner": owner}),
        ("refusals", "authorize_refund", {"reason": "not_authorized"}),
        ("refusals", "issue_refund", {"reason": "already_refunded"}),
        ("refusals", "issue_refund", {"reason": "owner_refused"}),
        *(("post_errors", "post_to_thread", {"platform": p}) for p in posters),
    ):
        zero(name, DESCRIPTIONS[name], {"activity_type": activity, **labels})
    meter.create_gauge(PREFIX + "worker_standby", STANDBY_DESCRIPTION).set(0)
    for outcome in ENDED_OUTCOMES:
        zero(
            ENDED_METRIC.removeprefix(PREFIX),
            ENDED_DESCRIPTION,
            {"workflow_type": WORKFLOW_TYPE, "outcome": outcome},
        )


async def run_worker(
    client: Client,
    temporal: TemporalSettings,
    settings: AgentSettings,
    posters: Mapping[str, ThreadPoster],
    grant_sources: Mapping[str, GrantSource] | None = None,
    *,
    host: str | None = None,
    go: Callable[[], Awaitable[None]] | None = None,
    interceptors: Sequence[Interceptor] = (),
    cached_conversations: int = DEFAULT_CACHED_CONVERSATIONS,
    sticky_timeout: timedelta = DEFAULT_STICKY_TIMEOUT,
    release_previous: bool = False,
) -> None:
    """Run until cancelled, then shut down gracefully (in-flight Activities get 5 s).

    `release_previous`: a Worker no supervisor watches resets, as it starts, the sticky queues
    of the conversations this host's gone Workers held (worker.pollers.gone_here).

    `go`: a warm standby's signal, called once everything slow (imports, the connection, the
    stores, the workflow sandbox's checks) is done; polling starts the moment it completes.

    `refund-bot worker` cancels it on SIGTERM, SIGHUP or SIGINT (worker.lifecycle.until_stopped);
    a SIGKILL is not graceful, and that is the drill.
    """
    # From the first moment, beside the slow build: a conversation a dead predecessor held goes
    # to the normal queue at this reset, not at the sticky timeout.
    releasing = (
        asyncio.create_task(reset_previous_here(client, temporal.task_queue, host))
        if release_previous
        else None
    )
    worker = await build_worker(
        client,
        temporal.task_queue,
        settings,
        posters,
        grant_sources,
        host=host,
        interceptors=interceptors,
        cached_conversations=cached_conversations,
        sticky_timeout=sticky_timeout,
    )
    # Before polling: conversations this code cannot replay are named now, in one line, not found
    # later as failing workflow tasks (docs/versioning.md).
    unsupported = await unsupported_conversations(client, WORKFLOW_TYPE)
    if unsupported.count:
        log.warning("%s", unsupported_line(unsupported))
    # A warm standby says so on its own /metrics, until it is promoted (or let go).
    standby = metric_meter().create_gauge(PREFIX + "worker_standby", STANDBY_DESCRIPTION)
    if go is not None:
        log.info(
            "standby %s ready; polls %s when told", worker_identity(host=host), temporal.task_queue
        )
        standby.set(1)
        await go()  # DURABLE WAIT (of a process): until the supervisor promotes this standby
    standby.set(0)
    async with worker:
        log.info("worker %s polling %s", worker_identity(host=host), temporal.task_queue)
        try:
            await asyncio.Event().wait()
        finally:
            if releasing is not None:
                releasing.cancel()


async def reset_previous_here(client: Client, task_queue: str, host: str | None) -> None:
    """Reset the conversations this host's gone Workers held (its own previous self included:
    a restarted container gets the same pid). A failure costs only the sticky timeout."""
    try:
        gone = await gone_here(client, client.namespace, task_queue, worker_identity(host=host))
        count = await reset_sticky_queues(client, client.namespace, task_queue, left_by=gone)
    except Exception as err:  # best effort: the worst case is the sticky timeout
        log.warning("Could not reset the conversations of this host's previous Workers: %s", err)
        return
    if count:
        log.info("Reset the sticky queue of %d conversation(s) gone Workers held", count)
