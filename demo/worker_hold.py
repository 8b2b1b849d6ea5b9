"""The supervisor's half of the paused restart: kill the Worker, hold it down, start it on resume.

    kill_worker -> supervisor.restart(kill=True, while_down=held) -> WorkerDown once it is dead
    start_worker (resume) | the hold's limit -> held returns -> the restart carries on as any other

Built on the product's restart that can wait (WorkerSupervisor.restart's while_down), and served
on the supervisor's control queues as a worker.supervisor.ControlService: the composition root
builds one per supervisor.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from demo.paused_restart import (
    KILL_ACTIVITY,
    PAUSE_LIMIT,
    START_ACTIVITY,
    PausedRestartWorker,
    PauseRequest,
    WorkerDown,
)
from worker.control import RestartOrder, RestartReport, host_control_queue, refuse_stale
from worker.supervisor import WorkerSupervisor

log = logging.getLogger(__name__)


@dataclass
class _Pause:
    """A paused restart: `resume` set lets it carry on; `restart` is the whole restart."""

    resume: asyncio.Event
    restart: asyncio.Task[RestartReport]


class WorkerHold:
    """Paused restarts of one supervisor's Worker. `limit` bounds how long one holds the Worker
    down, on this process's clock (tests shorten it)."""

    def __init__(
        self, supervisor: WorkerSupervisor, limit: float = PAUSE_LIMIT.total_seconds()
    ) -> None:
        self._supervisor = supervisor
        self.limit = limit
        self._pauses: dict[str, _Pause] = {}  # EXECUTION STATE: by restart Workflow id

    @property
    def host(self) -> str:
        return self._supervisor.host

    @property
    def workflows(self) -> Sequence[type]:
        return [PausedRestartWorker]

    @property
    def activities(self) -> Sequence[Callable[..., Any]]:
        return [self.kill_worker, self.start_worker]

    @activity.defn(name=KILL_ACTIVITY)
    async def kill_worker(self, pause: PauseRequest) -> WorkerDown:
        # Obeyed only by the host it names, while it is fresh (worker.control).
        order = RestartOrder(
            host=pause.host, supervisor=pause.supervisor, requested_at=pause.requested_at
        )
        refuse_stale(order, self.host)
        # The restart Workflow's id names the pause: its start_worker finds the same one.
        return await self.kill_and_hold(_restart_id(), pause.max_seconds)

    @activity.defn(name=START_ACTIVITY)
    async def start_worker(self) -> RestartReport:
        try:
            return await self.resume(_restart_id())
        except LookupError as err:
            raise ApplicationError(str(err), non_retryable=True) from err

    async def kill_and_hold(self, pause_id: str, max_seconds: float) -> WorkerDown:
        """SIGKILL the Worker and hold it down (no standby promoted, no restart on its death)
        until `resume(pause_id)`, or for at most min(max_seconds, limit) s, after which it
        restarts by itself. Returns once the old Worker is dead."""
        supervisor = self._supervisor
        held = min(max_seconds, self.limit)
        resume = asyncio.Event()
        down = asyncio.get_running_loop().create_future()
        # Read before the restart takes the supervisor's lock: a death restart in between would
        # make it the pid of a Worker that died on its own, and the report names the right one.
        old_pid = supervisor.pid

        async def while_down() -> None:
            down.set_result(None)
            try:
                # Bounded on this clock: a bot that died mid-pause never leaves it down.
                await asyncio.wait_for(resume.wait(), held)
            except TimeoutError:
                log.warning(
                    "Paused restart %s not resumed within %.0f s: restarting the Worker",
                    pause_id, held,
                )  # fmt: skip

        # Finished pauses are kept until the next one, for a late resume to read its report.
        self._pauses = {k: p for k, p in self._pauses.items() if not p.restart.done()}
        task = asyncio.create_task(
            supervisor.restart(kill=True, while_down=while_down), name=f"paused restart {pause_id}"
        )
        task.add_done_callback(_pause_done)
        self._pauses[pause_id] = _Pause(resume, task)
        await asyncio.wait([down, task], return_when=asyncio.FIRST_COMPLETED)
        if not down.done():
            await task  # it failed before the kill: raise why
        log.info("Worker pid %s down for paused restart %s", old_pid, pause_id)
        control_queue = supervisor.settings.control_task_queue
        return WorkerDown(
            old_pid=old_pid,
            host=supervisor.host,
            supervisor_pid=os.getpid(),
            resume_queue=host_control_queue(control_queue, supervisor.host),
            held_seconds=held,
        )

    async def resume(self, pause_id: str) -> RestartReport:
        """Let the paused restart start the new Worker; returns its report (the same report
        again for a late or repeated resume)."""
        pause = self._pauses.get(pause_id)
        if pause is None:
            raise LookupError(
                f"no paused restart {pause_id} on {self._supervisor.host}: its Worker was "
                "restarted already"
            )
        pause.resume.set()
        # Shielded: a cancelled Activity must not cut a restart short halfway.
        return await asyncio.shield(pause.restart)


def _pause_done(task: asyncio.Task[RestartReport]) -> None:
    # Nobody may await it (the Workflow died): its failure is logged here, once.
    if not task.cancelled() and task.exception() is not None:
        log.error("A paused restart failed", exc_info=task.exception())


def _restart_id() -> str:
    """The id of the restart Workflow running this Activity (these never run standalone)."""
    workflow_id = activity.info().workflow_id
    assert workflow_id is not None
    return workflow_id
