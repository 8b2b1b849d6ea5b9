"""refund-bot's counters in the Worker process: through the Activity's own metric meter.

    an Activity -> count(name, labels) -> activity.metric_meter() -> the Worker's Runtime
        -> its Prometheus exporter (WORKER_METRICS_ADDRESS, worker/telemetry.py)

The SDK adds the Activity's namespace, task queue and type as labels. Counted per Activity
attempt: an attempt that repeats one cut short by a dying Worker counts again (the owner's
records, not a counter, say how many refunds were made). Without metrics set up the meter is the
SDK's no-op one, so Activities count the same way in tests.
"""

from __future__ import annotations

from temporalio import activity

DESCRIPTIONS = {
    "refunds_issued": "Refunds the effect's owner reported succeeded, by owner (ledger, stripe)",
    "refusals": "Refunds not made: no live grant (not_authorized), the owner said already "
    "refunded (already_refunded) or refused (owner_refused)",
    "post_errors": "Posts and edits to a chat platform that failed (Temporal retries them)",
    "refund_errors": "Refund attempts that failed and are retried (the owner unreachable, rate "
    "limited, a server error), by owner",
    "overruled": "Decisions the refund rules changed from what the decider proposed, by rule",
    "model_retries": "Answers of the live model that were no usable step, each asked again or "
    "given to a person, by problem (no_tool, unknown_tool, bad_arguments, closed_question)",
}


def count(name: str, **labels: str) -> None:
    """Add 1 to refund_bot_<name>_total, with `labels`."""
    counter = activity.metric_meter().create_counter(f"refund_bot_{name}", DESCRIPTIONS[name])
    counter.add(1, labels)
