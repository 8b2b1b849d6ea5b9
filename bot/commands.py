"""The presenter's slash commands: one implementation, every platform.

Each adapter parses its platform's command payload (and mentions) into an Actor and arguments, calls
one of these, and shows the reply privately to whoever ran it. Who may run a command is itself a
live role check against the authorization store: presenter for the demo commands, admin for grants.
The conversation a command names is found after that check (`Conversation`): a link typed by
someone who may not run the command is never parsed, nor an order number searched for.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Protocol

from pydantic import BaseModel
from temporalio.client import Client, WorkflowFailureError
from temporalio.service import RPCError, RPCStatusCode

from agent.activities.authorize import GrantSource
from agent.codec import CodecError
from agent.effect_owner import OwnerRecord, refunds_at_owner
from agent.history import Survivors, what_survives
from agent.models import Actor, Platform, Role, Takeover
from agent.sayings import duration, money
from agent.settings import AgentSettings
from agent.stores.grants import GrantStore
from agent.visibility import escalations_waiting
from agent.workflow import RefundConversation
from bot.hold import HoldSwitch
from bot.ids import thread_link
from bot.untrusted import neutral, quoted

if TYPE_CHECKING:
    from discord.http import HTTPClient
    from slack_sdk.web.async_client import AsyncWebClient

    from bot.local.thread_store import LocalThreadStore

GRANTABLE_ROLES: tuple[Role, ...] = ("refund_approver", "presenter", "admin")
# Temporal's answers for a Workflow ID it has no conversation by: none by that id, or an id it
# refuses outright (past its length limit, say). Both were typed by a person.
_NO_SUCH_ID = frozenset({RPCStatusCode.NOT_FOUND, RPCStatusCode.INVALID_ARGUMENT})
_MAX_SHOWN_ID = 120
_MONEY = re.compile(r"^\$?(\d{1,9})(?:\.(\d{1,2}))?$")


class RestartReport(Protocol):
    old_pid: int | None
    new_pid: int
    seconds_to_ready: float
    host: str
    supervisor_pid: int | None
    seconds_paused: float  # of seconds_to_ready, held down on purpose (while_down)


class SupervisorGone(Exception):
    """No supervisor took a restart while it was meant (its host is gone, or was lost while it
    restarted): the message is the one line that says so, without its full stop. Nothing is
    restarted by it later."""


class WorkerControl(Protocol):
    """The Worker supervisors, wherever they run (refund_bot.wiring implements it: over Temporal,
    or in process; injected here)."""

    async def supervisor_hosts(self) -> list[str]:
        """The hosts whose supervisors are alive now (not merely listed by Temporal)."""
        ...

    async def restart(
        self, host: str | None, while_down: Callable[[], Awaitable[None]] | None = None
    ) -> RestartReport:
        """SIGKILL and replace host's Worker (any supervisor's when None). With while_down: it is
        awaited after the old Worker is dead and before a new one polls (no Worker of that
        supervisor is alive while it runs), then the new Worker starts. Over Temporal the pause
        is bounded (demo.paused_restart.PAUSE_LIMIT): past it the Worker comes back regardless.
        If while_down raises, the Worker still comes back and the error propagates. Raises
        SupervisorGone when no supervisor took it in time."""
        ...


@dataclass(frozen=True)
class ChannelRef:
    """A support channel, where a command was run: /refund-demo opens its threads there."""

    platform: Platform
    workspace: str
    channel: str


class DemoStage(Protocol):
    """/refund-demo's stage on one platform: the story posts through it. bot/ never builds one:
    each adapter asks the injected DemoStages for its platform's, and hands it on."""

    @property
    def platform(self) -> Platform: ...


class DemoStages(Protocol):
    """A stage for each platform, from what its adapter already holds (demo/ implements it)."""

    def slack(self, client: AsyncWebClient) -> DemoStage:
        """The request's Web API client (its credentials, its connections)."""
        ...

    def discord(self, http: HTTPClient, bot_user_id: int) -> DemoStage:
        """The gateway client's logged-in REST client, and the bot's own user id."""
        ...

    def local(self, threads: LocalThreadStore) -> DemoStage:
        """The terminal channel's thread store."""
        ...


# How an adapter names its platform's stage: called only for a command that will run.
StageFor = Callable[[DemoStages], DemoStage]


class SideBySideDemo(Protocol):
    """/refund-demo's story (demo/ implements it; the composition root injects it here)."""

    @property
    def stages(self) -> DemoStages: ...

    async def command(
        self, action: str, stage: DemoStage, channel: ChannelRef, seconds: float | None = None
    ) -> CommandReply:
        """Start the story in `channel` (action "" or "start"), or move it on: "next", "auto"
        (every `seconds`, when given), "crash", "stop"."""
        ...


DEMO_ACTIONS = ("", "start", "next", "auto", "crash", "stop")
DEMO_USAGE = "/refund-demo [next | auto [seconds] | crash | stop]"
MAX_AUTO_SECONDS = 60.0


# The conversation a command is about: its Workflow ID, or how to find it once the caller may run
# the command (the Workflow ID, or the reply saying why not: a malformed link, an unknown order).
Conversation = str | Callable[[], Awaitable["str | CommandReply"]]


class CommandReply(BaseModel):
    text: str
    ok: bool = True  # False: refused or failed; the adapter still shows `text` privately
    # A live model's summary of its proposal (/refund-status): the model's words, not ours. The
    # adapter shows it only through `shown`, quoted so that it cannot ping, link or format.
    model_note: str | None = None

    def shown(self) -> str:
        """The reply as its caller reads it: the text, and the model's note, quoted."""
        note = quoted(self.model_note or "")
        if not note:
            return self.text
        return f"{self.text}\nthe model's own summary (not checked by the rules): {note}"


def parse_limit(text: str) -> int | None:
    """'$500', '500' or '500.00' -> cents; raises ValueError on anything else."""
    match = _MONEY.match(text.strip().replace(",", ""))
    if not match:
        raise ValueError(f"not an amount: {text!r} (try 500 or $500.00)")
    return int(match.group(1)) * 100 + int((match.group(2) or "0").ljust(2, "0"))


def parse_role(text: str) -> Role:
    role = text.strip().lower().replace("-", "_")
    if role not in GRANTABLE_ROLES:
        raise ValueError(f"unknown role {text!r}: one of {', '.join(GRANTABLE_ROLES)}")
    return role


class ChatCommands(Protocol):
    """What the chat adapters ask of the commands: Commands below, or a test's stand-in."""

    async def crash_worker(self, actor: Actor, host: str | None = None) -> CommandReply: ...

    async def refund_demo(
        self, actor: Actor, action: str, stage: StageFor, channel: ChannelRef
    ) -> CommandReply: ...

    async def refund_status(self, actor: Actor, conversation: Conversation) -> CommandReply: ...

    async def refund_queue(self, actor: Actor) -> CommandReply: ...

    async def refund_takeover(
        self, actor: Actor, conversation: Conversation, taken: bool
    ) -> CommandReply: ...

    async def refund_release(self, actor: Actor, conversation: Conversation) -> CommandReply: ...

    async def refund_hold(self, actor: Actor, enabled: bool | None) -> CommandReply: ...

    async def refund_grant(
        self, actor: Actor, target: Actor, role_text: str, limit_text: str | None
    ) -> CommandReply: ...

    async def refund_revoke(self, actor: Actor, target: Actor, role_text: str) -> CommandReply: ...

    async def conversation_states(self, workflow_ids: Sequence[str]) -> dict[str, str]: ...


class Commands:
    def __init__(
        self,
        client: Client,
        workers: WorkerControl,
        settings: AgentSettings,
        grants: GrantStore,
        hold: HoldSwitch,
        demos: SideBySideDemo | None = None,
    ) -> None:
        # `workers` is injected (the control queue's client side lives in worker/), so the
        # request can reach a supervisor on any host without bot/ knowing how.
        self._client = client
        self._workers = workers
        self._settings = settings
        self._grants = grants
        self._hold = hold
        self._demos = demos
        # A platform that owns its people's roles (a Slack user group, a Discord role): asked
        # about its own users, as authorize_refund asks it (use_platform_grants).
        self._platform_grants: dict[str, GrantSource] = {}

    def use_platform_grants(self, sources: Mapping[str, GrantSource]) -> None:
        """The platforms' live grant sources, once their connections exist (refund_bot.app)."""
        self._platform_grants.update(sources)

    async def _refusal(self, actor: Actor, *roles: Role) -> CommandReply | None:
        # AUTHORIZATION STATE: read live for every command, like every refund, from the owner of
        # this person's roles: their platform's, where it has one; the grants store otherwise.
        source: GrantSource = self._platform_grants.get(actor.platform, self._grants)
        for role in roles:
            if await source.live_grant(actor, role) is not None:
                return None
        return CommandReply(
            ok=False,
            text=f"Sorry {actor.label}, this command needs the {' or '.join(roles)} role, "
            "and you don't hold it. Ask an admin for /refund-grant.",
        )

    async def conversation_states(self, workflow_ids: Sequence[str]) -> dict[str, str]:
        """Where each conversation stands, asked of Temporal now: "running", "completed",
        "failed", … or "none" when Temporal has no conversation by that id (yet)."""

        async def state(workflow_id: str) -> str:
            try:
                described = await self._client.get_workflow_handle(workflow_id).describe()
            except RPCError as err:
                if err.status == RPCStatusCode.NOT_FOUND:
                    return "none"
                raise
            status = described.status
            return status.name.lower().replace("_", " ") if status else "unknown"

        states = await asyncio.gather(*(state(w) for w in workflow_ids))
        return dict(zip(workflow_ids, states, strict=True))

    async def crash_worker(self, actor: Actor, host: str | None = None) -> CommandReply:
        """SIGKILL a Worker and start a new one: `host`'s, or (none named) whichever supervisor
        takes the request; the reply says which host and pid, and names the other hosts."""
        if refusal := await self._refusal(actor, "presenter"):
            return refusal
        host = (host or "").strip() or None
        hosts = await self._workers.supervisor_hosts()
        if not hosts:
            return CommandReply(
                ok=False,
                text="No Worker supervisor answers, so no Worker can be crashed and restarted: "
                "`refund-bot run` and `refund-bot worker --supervised` run one.",
            )
        if host is not None and host not in hosts:
            return CommandReply(
                ok=False,
                text=f"No Worker supervisor answers on host {host!r}; they answer on: "
                f"{', '.join(hosts)}.",
            )
        try:
            report = await self._workers.restart(host)
        except SupervisorGone as err:
            # Gone since the hosts were read (or lost while it restarted): one line, naming the
            # hosts alive now.
            alive = [h for h in await self._workers.supervisor_hosts() if h != host]
            where = f"; they answer on: {', '.join(alive)}." if alive else "."
            return CommandReply(ok=False, text=f"{err}{where}")
        except WorkflowFailureError as err:
            return CommandReply(ok=False, text=f"The Worker restart failed: {err.cause or err}")
        supervisor = f" (supervisor pid {report.supervisor_pid})" if report.supervisor_pid else ""
        text = (
            f"Worker SIGKILLed and replaced on {report.host}{supervisor}: old pid "
            f"{report.old_pid}, new pid {report.new_pid}, ready in "
            f"{report.seconds_to_ready:.2f}s. Open conversations carry on from Event History."
        )
        others = [h for h in hosts if h != report.host]
        if host is None and others:
            text += f" Other hosts with a supervisor: {', '.join(others)} (/crash-worker <host>)."
        return CommandReply(text=text)

    async def refund_demo(
        self, actor: Actor, action: str, stage: StageFor, channel: ChannelRef
    ) -> CommandReply:
        """/refund-demo: the two demos side by side in `channel`, on the platform whose stage
        `stage` picks. Presenters only: anyone else is told so, and nothing starts."""
        if refusal := await self._refusal(actor, "presenter"):
            return refusal
        words = action.strip().lower().split()
        seconds = None
        if len(words) == 2 and words[0] == "auto":
            try:
                seconds = float(words[1])
            except ValueError:
                seconds = -1.0
            if not 0 <= seconds <= MAX_AUTO_SECONDS:
                return CommandReply(
                    ok=False, text=f"auto takes seconds from 0 to {MAX_AUTO_SECONDS:g}."
                )
        elif len(words) > 1 or (words and words[0] not in DEMO_ACTIONS):
            return CommandReply(ok=False, text=f"Usage: {DEMO_USAGE}")
        if self._demos is None:
            return CommandReply(ok=False, text="This process does not run the side-by-side demo.")
        action = words[0] if words else ""
        return await self._demos.command(action, stage(self._demos.stages), channel, seconds)

    async def refund_status(self, actor: Actor, conversation: Conversation) -> CommandReply:
        if refusal := await self._refusal(actor, "presenter", "refund_approver"):
            return refusal
        workflow_id = await _found(conversation)
        if isinstance(workflow_id, CommandReply):
            return workflow_id
        try:
            survivors = await what_survives(self._client, workflow_id)
        except RPCError as err:
            if err.status in _NO_SUCH_ID:
                return CommandReply(ok=False, text=f"No conversation {_shown(workflow_id)}.")
            raise
        except CodecError as err:
            # Never an empty view: say which key is missing (its id, never the key).
            return CommandReply(ok=False, text=f"Can't read {workflow_id}: {err}.")
        payment_ref = survivors.order.payment_ref if survivors.order else None
        owner = await refunds_at_owner(self._settings, workflow_id, payment_ref)
        return status_reply(workflow_id, survivors, owner)

    async def refund_queue(self, actor: Actor) -> CommandReply:
        """The escalations waiting for a decision, across every thread, oldest first: read from
        Temporal's visibility (no Worker needed, no copy kept anywhere)."""
        if refusal := await self._refusal(actor, "refund_approver", "presenter"):
            return refusal
        waiting = await escalations_waiting(self._client)
        if not waiting:
            return CommandReply(text="No escalation is waiting for a decision.")
        lines = [f"{len(waiting)} escalation(s) waiting for a decision, oldest first:"]
        now = datetime.now(UTC)
        for entry in waiting:
            reminded = "approvers reminded" if entry.reminded else "not reminded yet"
            waited = duration(now - entry.since) if entry.since else "?"
            lines.append(
                f"• order {entry.order} ({money(entry.amount_cents)}), waiting {waited}, "
                f"{reminded}: {thread_link(entry.workflow_id)}"
            )
        return CommandReply(text="\n".join(lines))

    async def refund_takeover(
        self, actor: Actor, conversation: Conversation, taken: bool
    ) -> CommandReply:
        """/refund-takeover (taken) and /refund-handback: a support agent holds the conversation;
        the agent says nothing there until it is handed back. Approvals still count meanwhile."""
        if refusal := await self._refusal(actor, "refund_approver", "presenter"):
            return refusal
        workflow_id = await _found(conversation)
        if isinstance(workflow_id, CommandReply):
            return workflow_id
        try:
            await self._client.get_workflow_handle(workflow_id).signal(
                RefundConversation.takeover, Takeover(actor=actor, taken=taken)
            )
        except RPCError as err:
            if err.status in _NO_SUCH_ID:
                return CommandReply(ok=False, text=f"No open conversation {_shown(workflow_id)}.")
            raise
        if taken:
            return CommandReply(
                text=f"You have taken over {workflow_id}: the agent stays quiet there until "
                "you hand it back with /refund-handback. Approvals still count meanwhile."
            )
        return CommandReply(
            text=f"Handed {workflow_id} back to the agent: it carries on, with what the customer "
            "wrote meanwhile."
        )

    async def refund_release(self, actor: Actor, conversation: Conversation) -> CommandReply:
        if refusal := await self._refusal(actor, "presenter"):
            return refusal
        workflow_id = await _found(conversation)
        if isinstance(workflow_id, CommandReply):
            return workflow_id
        try:
            await self._client.get_workflow_handle(workflow_id).signal(RefundConversation.release)
        except RPCError as err:
            if err.status in _NO_SUCH_ID:
                return CommandReply(ok=False, text=f"No open conversation {_shown(workflow_id)}.")
            raise
        return CommandReply(text=f"Released {workflow_id}: the refund goes ahead.")

    async def refund_hold(self, actor: Actor, enabled: bool | None) -> CommandReply:
        if refusal := await self._refusal(actor, "presenter"):
            return refusal
        if enabled is not None:
            await self._hold.set(enabled)
        state = "on" if await self._hold.enabled() else "off"
        return CommandReply(text=f"Hold before refund for new conversations: {state}.")

    async def refund_grant(
        self, actor: Actor, target: Actor, role_text: str, limit_text: str | None
    ) -> CommandReply:
        if refusal := await self._refusal(actor, "admin"):
            return refusal
        try:
            role = parse_role(role_text)
            limit = parse_limit(limit_text) if limit_text else None
        except ValueError as err:
            return CommandReply(ok=False, text=str(err))
        grant = await self._grants.grant(target, role, limit, by=actor)
        shown = "no limit" if limit is None else f"limit ${limit / 100:,.2f}"
        return CommandReply(
            text=f"Granted {role} to {target.label} ({shown}), grant #{grant.grant_id}."
        )

    async def refund_revoke(self, actor: Actor, target: Actor, role_text: str) -> CommandReply:
        if refusal := await self._refusal(actor, "admin"):
            return refusal
        try:
            role = parse_role(role_text)
        except ValueError as err:
            return CommandReply(ok=False, text=str(err))
        revoked = await self._grants.revoke(target, role, by=actor)
        if not revoked:
            return CommandReply(ok=False, text=f"{target.label} holds no live {role} grant.")
        return CommandReply(
            text=f"Revoked {role} from {target.label}. The next refund check sees it."
        )


def status_reply(workflow_id: str, survivors: Survivors, owner: OwnerRecord) -> CommandReply:
    """/refund-status's answer: what survives, and the refund as its owner records it. The
    customer's words are quoted as the model's note is (bot.untrusted), so that on no platform
    can they ping, link, format or reach a terminal's escape codes."""
    answers = "; ".join(f"{q}: {quoted(a) or '(blank)'}" for q, a in survivors.answers.items())
    lines = [
        f"*{workflow_id}*  (read from Temporal's Event History just now; no Worker needed)",
        f"customer answers: {len(survivors.answers)} ({answers or 'none'})",
        f"completed lookups: {len(survivors.lookups)} ({', '.join(survivors.lookups) or 'none'})",
        f"next action: {survivors.next_action}",
        f"next deadline: {survivors.next_deadline or 'none'}",
        f"decision: {survivors.decision.summary if survivors.decision else 'not yet'}",
        f"refund step: {survivors.refund.state}"
        + (f", attempt {survivors.refund.attempts}" if survivors.refund.attempts else ""),
        f"refund at the {owner.owner}: " + ("; ".join(owner.refunds) or "none"),
    ]
    if survivors.taken_over:
        lines.insert(1, f"taken over by {survivors.taken_over}: the agent is quiet")
    if survivors.waiting_on:
        lines.insert(1, f"waiting on {survivors.waiting_on}")
    return CommandReply(text="\n".join(lines), model_note=survivors.model_note)


async def _found(conversation: Conversation) -> str | CommandReply:
    return conversation if isinstance(conversation, str) else await conversation()


def _shown(workflow_id: str) -> str:
    # A typed id is quoted back; one that is no id of ours may be long.
    return neutral(workflow_id, _MAX_SHOWN_ID)
