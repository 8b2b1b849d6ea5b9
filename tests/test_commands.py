"""The presenter's commands against the real dev server and a real, supervised Worker process."""

from __future__ import annotations

from temporalio.client import WorkflowHandle

from agent.models import Actor
from bot.ids import workflow_id_for
from bot.local.terminal import PEOPLE, inbound, thread_ref
from harness.conditions import wait_for
from harness.conversation import LocalConversation
from harness.fakes.openai_api import CANARY, FakeOpenAI
from harness.owner import refunds_made
from harness.stack import supervised_stack
from refund_bot.wiring import local_thread_store
from worker.lifecycle import alive

PRESENTER, SUPPORT, CUSTOMER = PEOPLE["presenter"], PEOPLE["support"], PEOPLE["customer"]


async def _held(conv: LocalConversation, text: str = "please refund order 1234") -> WorkflowHandle:
    handle = await conv.open(text, hold=True)
    await conv.next_bot_message()
    await conv.reply("Yes")
    await conv.next_bot_message()
    await conv.reply("Split seam")
    return handle


async def test_crash_then_status_without_a_worker_then_release(temporal_env, tmp_path) -> None:
    async with supervised_stack(temporal_env, tmp_path) as stack:
        supervisor = stack.supervisor
        assert supervisor is not None  # supervised_stack's
        conv = LocalConversation(
            stack.client, local_thread_store(stack.settings), stack.temporal.task_queue
        )
        handle = await _held(conv)
        await conv.wait_phase("held_before_refund")
        old_pid = supervisor.pid
        assert old_pid is not None

        crashed = await stack.commands.crash_worker(PRESENTER)
        assert crashed.ok, crashed.text
        assert f"old pid {old_pid}" in crashed.text and f"new pid {supervisor.pid}" in crashed.text
        await wait_for(lambda: not alive(old_pid), what="the old Worker gone")

        await supervisor.stop()  # no Worker alive at all
        status = await stack.commands.refund_status(PRESENTER, handle.id)
        assert status.ok, status.text
        assert "customer answers: 2 (item_opened: `Yes`; damage: `Split seam`)" in status.text
        assert "completed lookups: 2 (lookup_order, lookup_customer_history)" in status.text
        assert "next action: issue refund" in status.text
        assert "refund at the offline ledger: none" in status.text

        await supervisor.start()
        released = await stack.commands.refund_release(PRESENTER, handle.id)
        assert released.ok
        outcome = await handle.result()
        assert outcome.status == "refunded"
        status = await stack.commands.refund_status(PRESENTER, handle.id)
        assert "refund at the offline ledger: re_ledger_" in status.text
        assert "(calls with its key: 1)" in status.text
    assert len(await refunds_made(stack.settings)) == 1


async def test_commands_are_refused_to_people_without_the_role(temporal_env, tmp_path) -> None:
    async with supervised_stack(temporal_env, tmp_path) as stack:
        supervisor = stack.supervisor
        assert supervisor is not None  # supervised_stack's
        pid = supervisor.pid
        assert pid is not None
        refused = await stack.commands.crash_worker(CUSTOMER)
        assert not refused.ok and "needs the presenter role" in refused.text
        assert supervisor.pid == pid and alive(pid)  # nothing was killed
        for reply in (
            await stack.commands.refund_release(SUPPORT, "local-local-support-t1"),
            await stack.commands.refund_hold(CUSTOMER, True),
            await stack.commands.refund_grant(SUPPORT, CUSTOMER, "refund_approver", "100"),
            await stack.commands.refund_revoke(SUPPORT, SUPPORT, "refund_approver"),
        ):
            assert not reply.ok and "you don't hold it" in reply.text
        status = await stack.commands.refund_status(CUSTOMER, "local-local-support-t1")
        assert not status.ok


async def test_grant_and_revoke_change_the_next_authorization(temporal_env, tmp_path) -> None:
    async with supervised_stack(temporal_env, tmp_path) as stack:
        threads = local_thread_store(stack.settings)
        assert (await stack.commands.refund_revoke(PRESENTER, SUPPORT, "refund_approver")).ok
        conv = LocalConversation(stack.client, threads, stack.temporal.task_queue)
        handle = await conv.open("please refund order 4500")
        for answer in ("Yes", "Split seam"):
            await conv.next_bot_message()
            await conv.reply(answer)
        assert (await conv.next_bot_message()).kind == "escalation"
        await conv.click("approve", SUPPORT)
        assert "no live refund_approver grant" in (await conv.next_bot_message()).text

        granted = await stack.commands.refund_grant(PRESENTER, SUPPORT, "refund_approver", "$200")
        assert granted.ok and "limit $200.00" in granted.text
        await conv.click("approve", SUPPORT)
        assert (
            "above Sam (support agent)'s refund_approver limit of $200.00"
            in (await conv.next_bot_message()).text
        )

        assert (await stack.commands.refund_grant(PRESENTER, SUPPORT, "refund_approver", "1000")).ok
        await conv.click("approve", SUPPORT)
        outcome = await handle.result()
    assert outcome.status == "refunded"


async def test_hold_switch_decides_whether_new_conversations_hold(temporal_env, tmp_path) -> None:
    async with supervised_stack(temporal_env, tmp_path) as stack:
        assert "on" in (await stack.commands.refund_hold(PRESENTER, True)).text
        threads = local_thread_store(stack.settings)
        root = await threads.open_thread("support", CUSTOMER.user_id, "please refund order 1234")
        await stack.router.on_message(inbound(root, CUSTOMER))
        conv = LocalConversation(stack.client, threads, stack.temporal.task_queue)
        conv.thread_id = root.thread_id
        conv.handle = stack.client.get_workflow_handle(workflow_id_for(thread_ref(root.thread_id)))
        for answer in ("Yes", "Split seam"):
            await conv.next_bot_message()
            await conv.reply(answer)
        assert (await conv.wait_phase("held_before_refund")).held


async def test_status_names_the_rule_that_overruled_the_model_and_quotes_its_words(
    temporal_env, tmp_path
) -> None:
    """A hostile model escalates the final-sale order with a rationale full of mentions and links:
    the rules deny it, /refund-status (read with no Worker alive) says which rule did, and shows
    staff the model's words only quoted, never in the thread."""
    async with FakeOpenAI(behaviour="escalate_injected") as model:
        worker_env = {
            "OPENAI_API_KEY": model.api_key,
            "OPENAI_BASE_URL": model.api_url,
            "OPENAI_MODEL": "hostile-model",
        }
        async with supervised_stack(temporal_env, tmp_path, worker_env) as stack:
            conv = LocalConversation(
                stack.client, local_thread_store(stack.settings), stack.temporal.task_queue
            )
            handle = await conv.open("please refund order 3003", decider="openai")
            outcome = await handle.result()
            assert stack.supervisor is not None  # supervised_stack's
            await stack.supervisor.stop()
            status = await stack.commands.refund_status(SUPPORT, handle.id)
    assert outcome.status == "denied"
    assert outcome.message == (
        "I can't refund this order. Order 3003 was a final-sale item, and final-sale items cannot "
        "be refunded."
    )
    assert status.ok, status.text
    assert (
        "decision: openai:hostile-model proposed escalate; rule final_sale made it deny"
        in status.text
    )
    shown = status.shown()
    assert "the model's own summary (not checked by the rules): `" in shown
    assert CANARY in shown and "\x1b" not in shown
    said = [m.text for m in await conv.bot_messages()]
    assert not any(CANARY in text for text in said)


async def test_a_platform_that_owns_its_peoples_roles_decides_who_runs_staff_commands(
    temporal_env, agent_settings
) -> None:
    """A Slack user-group member (a Discord role holder) is a refund approver for the staff
    commands too, read live from the platform; the grants store answers for everyone else."""
    from agent.stores.databases import database_for
    from agent.stores.grants import Grant, GrantStore
    from bot.commands import Commands
    from bot.hold import HoldSwitch

    member = Actor(platform="slack", user_id="U0GROUP", display_name="grouped")
    outsider = Actor(platform="slack", user_id="U0OUT", display_name="outsider")

    class SlackGroup:
        async def live_grant(self, actor: Actor, role: str) -> Grant | None:
            if actor != member or role != "refund_approver":
                return None
            return Grant(
                grant_id=0,
                platform="slack",
                user_id=member.user_id,
                role="refund_approver",
                limit_cents=None,
                granted_at="2026-01-01T00:00:00+00:00",
                granted_by="slack-usergroup:S0APPROVERS",
            )

    database = database_for(agent_settings)
    commands = Commands(
        temporal_env.client,
        workers=None,  # type: ignore[arg-type]  # the queue never restarts a Worker
        settings=agent_settings,
        grants=GrantStore(database),
        hold=HoldSwitch(database, False),
    )
    assert not (await commands.refund_queue(member)).ok  # no platform source yet: the store
    commands.use_platform_grants({"slack": SlackGroup()})
    assert (await commands.refund_queue(member)).ok
    refused = await commands.refund_queue(outsider)
    assert not refused.ok and "you don't hold it" in refused.text
