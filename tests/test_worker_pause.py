"""A paused Worker restart: the caller reads Event History while no Worker is alive, then the new
Worker starts. Over the control queue, as a bot process on any host asks for it; real Worker
processes (the real one, or tests/support/dummy_worker.py) on the session's Temporal server.

    restart(host, while_down) -> kill_worker: SIGKILL, held -> while_down() -> resume
        -> start_worker: standby promoted / spawned, polling -> RestartReport
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowHandle, WorkflowHistory
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer

from agent.history import what_survives
from demo.paused_restart import PausedRestartWorker
from demo.terminal import SupervisorInProcess
from demo.worker_hold import WorkerHold
from harness import queue_settings
from harness.codec import TEST_CODEC_ENV, TEST_CONVERTER
from harness.conditions import wait_for
from harness.conversation import LocalConversation
from harness.stack import supervised_stack
from refund_bot.wiring import SupervisorsOverTemporal, local_thread_store
from worker.control import RestartReport, RestartWorker, worker_identity
from worker.lifecycle import alive
from worker.pollers import worker_is_polling, workflow_pollers
from worker.supervisor import WorkerSupervisor

CHILD = [sys.executable, "-m", "tests.support.dummy_worker"]
HISTORIES = Path(__file__).parent / "control_histories"
# The supervisor's own bound on a pause, shortened from PAUSE_LIMIT's minute.
LIMIT = 2.0


@pytest.fixture(scope="module")
async def supervisor(temporal_env: WorkflowEnvironment) -> AsyncIterator[WorkerSupervisor]:
    """One supervised dummy Worker for the module; each test leaves it running and polling."""
    settings = queue_settings(temporal_env.client, "pause")
    sup = WorkerSupervisor(
        settings,
        CHILD,
        client=temporal_env.client,
        env=TEST_CODEC_ENV,
        ready_timeout=20,
        control=lambda supervisor: WorkerHold(supervisor, limit=LIMIT),
    )
    async with sup:
        yield sup


async def polling(sup: WorkerSupervisor, pid: int) -> bool:
    s = sup.settings
    identity = worker_identity(pid, sup.host)
    return await worker_is_polling(sup.client, s.namespace, s.task_queue, identity)


@pytest.mark.parametrize(
    "path", sorted(HISTORIES.rglob("*.json")), ids=lambda p: str(p.relative_to(HISTORIES))
)
async def test_a_recorded_restart_replays(path: Path) -> None:
    """before-pause/ was recorded before RestartWorker took a PauseRequest, before-orders/ before
    a restart order expired (the restart on the Workflow's own queue, taken whenever), the others
    with orders: a /crash-worker running at the deploy must take the same command on the new
    code."""
    replayer = Replayer(
        workflows=[RestartWorker, PausedRestartWorker], data_converter=TEST_CONVERTER
    )
    result = await replayer.replay_workflow(_read(path), raise_on_replay_failure=False)
    assert result.replay_failure is None


def _read(path: Path) -> WorkflowHistory:
    return WorkflowHistory.from_json(path.stem, path.read_text())


async def test_history_is_read_with_no_worker_alive_then_the_standby_takes_over(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    client = temporal_env.client
    async with supervised_stack(temporal_env, tmp_path) as stack:
        sup, temporal = stack.supervisor, stack.temporal
        assert sup is not None
        conv = LocalConversation(client, local_thread_store(stack.settings), temporal.task_queue)
        handle = await conv.open("please refund order 1234", hold=True)
        for answer in ("Yes", "Split seam"):
            await conv.next_bot_message()
            await conv.reply(answer)
        await conv.wait_phase("held_before_refund")
        old, standby = sup.pid, sup.standby_pid
        assert old is not None and standby is not None

        async def while_down() -> None:
            assert not alive(old)
            # Held: no child of this supervisor, and its standby not told to poll.
            assert not sup.running and sup.standby_pid == standby
            pollers = await workflow_pollers(client, temporal.namespace, temporal.task_queue)
            assert worker_identity(standby, sup.host) not in {p.identity for p in pollers}
            # Nobody answers the conversation (Temporal still lists the dead Worker's poller for
            # minutes, so it is asked, not listed).
            with pytest.raises(RPCError):
                await handle.query("view", rpc_timeout=timedelta(seconds=2))
            survivors = await what_survives(client, handle.id)
            assert survivors.answers == {"item_opened": "Yes", "damage": "Split seam"}
            assert survivors.next_action == "issue refund"

        report = await SupervisorsOverTemporal(client, temporal).restart(None, while_down)

        assert (report.old_pid, report.new_pid, report.host) == (old, standby, sup.host)
        assert report.seconds_paused >= 2.0  # the query's timeout, at least
        assert report.seconds_to_ready > report.seconds_paused
        assert sup.pid == standby and await polling(sup, standby)
        await handle.signal("release")
        outcome = await wait_for(
            lambda: _closed(handle), timeout=30, what="the released conversation's outcome"
        )
        assert outcome == "completed"


async def _closed(handle: WorkflowHandle) -> str | None:
    status = (await handle.describe()).status
    return status.name.lower() if status and status.name != "RUNNING" else None


async def test_while_down_that_raises_still_brings_the_worker_back(
    supervisor: WorkerSupervisor, client: Client
) -> None:
    old = supervisor.pid
    assert old is not None

    class ReadFailed(Exception):
        pass

    async def while_down() -> None:
        raise ReadFailed("the presenter's read failed")

    control = SupervisorsOverTemporal(client, supervisor.settings)
    with pytest.raises(ReadFailed):
        await control.restart(supervisor.host, while_down)

    # Back before the error reached the caller, resumed by it (not by the supervisor's limit).
    report = supervisor.last_report
    assert report is not None and report.old_pid == old and report.new_pid == supervisor.pid
    assert report.seconds_paused < LIMIT
    assert not alive(old) and await polling(supervisor, report.new_pid)


async def test_the_supervisor_brings_the_worker_back_by_itself_after_its_limit(
    supervisor: WorkerSupervisor, client: Client
) -> None:
    """No resume within the supervisor's limit (the bot that asked could have died): it restarts
    the Worker on its own clock. The resume that arrives late changes nothing."""
    old = supervisor.pid
    assert old is not None
    restarted: list[RestartReport] = []

    async def while_down() -> None:
        async def by_itself() -> RestartReport | None:
            last = supervisor.last_report
            return last if last is not None and last.old_pid == old else None

        # The Workflow would wait a minute for the resume; the supervisor does not.
        restarted.append(await wait_for(by_itself, timeout=LIMIT + 20, what="a restart"))

    report = await SupervisorsOverTemporal(client, supervisor.settings).restart(None, while_down)

    assert report == restarted[0]  # the late resume returned that same restart's report
    # Held for the supervisor's limit, not the Workflow's minute (slack for a loaded machine).
    assert LIMIT <= report.seconds_paused < LIMIT + 10
    assert supervisor.pid == report.new_pid and await polling(supervisor, report.new_pid)


async def test_in_process_control_pauses_the_same_way(supervisor: WorkerSupervisor) -> None:
    old = supervisor.pid
    assert old is not None
    seen: list[bool] = []

    async def while_down() -> None:
        seen.append(not alive(old) and not supervisor.running)

    report = await SupervisorInProcess(supervisor).restart(None, while_down)

    assert seen == [True]
    assert report.old_pid == old and await polling(supervisor, report.new_pid)
    with pytest.raises(ValueError, match="not 'host-z'"):
        await SupervisorInProcess(supervisor).restart("host-z")
