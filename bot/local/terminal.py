"""The local support channel: a terminal where you type as a customer, support agent or presenter.

    typed line -> router.on_message | 1 or 2 -> bot.clicks.on_click | /command -> bot.commands
    thread store (the Worker's posts and edits) -> printed lines

It is a chat platform like Slack or Discord, only smaller: what you type goes through the same
router (and the same slash commands, and the same click flow); what the agent posts is read back
from the SQLite thread store the Worker writes to, so a message posted by a Worker that was killed
mid-conversation still appears, once.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import shlex
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, TextIO

from agent import tracing
from agent.activities.authorize import GrantSource
from agent.models import Actor, ThreadRef
from bot.clicks import APPROVER_ROLE, approver_check, decided_line, on_click
from bot.commands import ChannelRef, ChatCommands, CommandReply, DemoStage, DemoStages
from bot.conversations import NOT_KEPT, NOTICES, InboundClick, InboundMessage, Routed, Router
from bot.ids import workflow_id_for
from bot.local.markup import plain
from bot.local.thread_store import LOCAL_WORKSPACE, LocalMessage, LocalThreadStore
from bot.reconnect import one_line

log = logging.getLogger(__name__)

CHANNEL = "support"
PEOPLE: dict[str, Actor] = {
    "customer": Actor(platform="local", user_id="customer", display_name="Nyghtowl (customer)"),
    "support": Actor(platform="local", user_id="support", display_name="Sam (support agent)"),
    "presenter": Actor(platform="local", user_id="presenter", display_name="Pat (presenter)"),
    "marlow": Actor(platform="local", user_id="marlow", display_name="Marlow (another customer)"),
}
_PEOPLE_IDS = frozenset(person.user_id for person in PEOPLE.values())
HELP = """\
Type a message to post it as the current person. A message outside a thread opens one.
  /as customer|support|presenter|marlow   switch who you are
  /new                                    your next message opens a new thread
  /threads                                list the threads and whether each is still open
  /thread t3                              switch to thread t3
  1 or /approve, 2 or /deny               click Approve or Deny on the thread's escalation
  /crash-worker [host]                    SIGKILL a Worker (that host's) and start a new one
  /refund-status [thread]                 what survives, read from Event History
  /refund-release [thread]                release a refund held for the demo
  /refund-queue                           the escalations waiting for a decision, oldest first
  /refund-takeover [thread]               take a conversation over: the agent stays quiet there
  /refund-handback [thread]               hand it back: the agent carries on
  /refund-hold on|off                     whether new conversations hold before the refund
  /refund-demo [next|auto [s]|crash|stop] the same crash without and with Temporal, side by side
  /refund-grant @user role [limit]        roles: refund_approver, presenter, admin
  /refund-revoke @user role
  /help, /quit"""


# A conversation's state at Temporal, as /threads shows it.
STATES = {
    "running": "open",
    "completed": "finished",
    "failed": "failed",
    "terminated": "ended",
    "canceled": "ended",
    "timed out": "ended",
    "continued as new": "open",
    "none": "waiting",  # not started at Temporal yet: its first message is still in the inbox
}

# Commands of the terminal itself, not of refund-bot: they reach neither the router nor Temporal.
_TERMINAL_ONLY = frozenset({"/help", "/quit", "/as", "/new", "/thread", "/approve", "/deny"})

# What the terminal says after a message to a thread whose conversation has finished: here,
# "post in the support channel" means /new.
FINISHED = "This conversation has finished. Type /new, then your message, to start a new one."


def thread_ref(thread_id: str) -> ThreadRef:
    return ThreadRef(platform="local", workspace=LOCAL_WORKSPACE, channel=CHANNEL, thread=thread_id)


def inbound(message: LocalMessage, author: Actor) -> InboundMessage:
    """A message typed into the local channel, as the router takes it."""
    return InboundMessage(
        event_id=message.message_id,
        thread=thread_ref(message.thread_id),
        message_id=message.message_id,
        author=author,
        text=message.text,
        opens_thread=message.kind == "customer",  # a thread's root message
    )


def render(message: LocalMessage, edited: bool = False) -> str:
    who = "refund-bot" if message.author_is_bot else message.author
    lines = [f"[{message.thread_id}] {who}{' (edited)' if edited else ''}: {message.text}"]
    if message.actions:
        lines.append(_choices(message.thread_id))
    return "\n".join(lines)


def _choices(thread: str) -> str:
    """The terminal's Approve and Deny buttons."""
    return f"[{thread}]    1) Approve   2) Deny   (a support agent types 1 or 2)"


@dataclass
class TypedChoice:
    """The click flow's surface in the terminal (a bot.clicks.ClickSurface): a 1 or 2 typed in a
    thread, answered with printed lines."""

    say: Callable[[str], None]
    thread: str
    click: InboundClick
    approval_needs: str = APPROVER_ROLE

    async def tell(self, text: str) -> None:
        self.say(f"(only you can see this) {text}")

    async def checking(self) -> None:
        self.say(f"[{self.thread}] {decided_line(self.click)}")

    async def restore(self) -> None:
        self.say(_choices(self.thread))

    async def conclude(self, outcome: str) -> None:
        self.say(f"[{self.thread}] {decided_line(self.click, outcome)}")


class LocalChannel:
    def __init__(
        self,
        threads: LocalThreadStore,
        router: Router,
        commands: ChatCommands,
        out: TextIO = sys.stdout,
        *,
        grants: GrantSource | None = None,
    ) -> None:
        """`grants`: the live grant source for the click's pre-check (none: every click goes to
        the Workflow, whose authorization check says the result in the thread)."""
        self._threads = threads
        self._router = router
        self._may_approve = approver_check(grants) if grants is not None else None
        self._commands = commands
        self._out = out
        self.me = PEOPLE["customer"]
        self.thread: str | None = None
        self._shown = 0
        self._edits_shown = 0
        self._clicks = 0
        # Thread -> the escalation round last shown there: what a typed 1 or 2 answers.
        self._rounds: dict[str, int] = {}

    def say(self, text: str) -> None:
        print(plain(text), file=self._out, flush=True)

    async def run(self, lines: asyncio.StreamReader | None = None) -> None:
        """Until /quit or end of input."""
        lines = lines or await _stdin_reader()
        await self.catch_up()
        self.say("refund-bot local support channel. /help lists the commands.")
        self.say(f"You are {self.me.label}. Try: please refund order 1234")
        if earlier := await self._threads.threads():
            count = f"{len(earlier)} earlier thread{'s' if len(earlier) != 1 else ''}"
            self.say(f"{count}: /threads lists them, /thread {earlier[-1].thread_id} enters one.")
        tail = asyncio.create_task(self._tail())
        try:
            while raw := await lines.readline():
                if not await self.handle(raw.decode(errors="replace").strip()):
                    break
        finally:
            tail.cancel()

    async def catch_up(self) -> None:
        """Show only what is posted from now on."""
        self._shown = max((m.seq for m in await self._threads.messages()), default=0)
        self._edits_shown = max((n for n, _ in await self._threads.edits()), default=0)

    async def _tail(self) -> None:
        while True:
            await self.show_new()
            await asyncio.sleep(0.2)

    async def show_new(self) -> None:
        for message in await self._threads.messages(after_seq=self._shown):
            self._shown = message.seq
            if not message.author_is_bot and message.author not in _PEOPLE_IDS:
                # Someone no terminal types as: /refund-demo's demo customer.
                self.say(render(message))
            if message.author_is_bot:
                self.say(render(message))
                if message.round is not None:
                    self._rounds[message.thread_id] = message.round
                if message.kind == "outcome" and message.thread_id == self.thread:
                    self.say(f"[{message.thread_id}] (finished: /new starts another thread)")
        for number, message in await self._threads.edits(after_edit=self._edits_shown):
            self._edits_shown = number
            self.say(render(message, edited=True))

    async def handle(self, line: str) -> bool:
        """One line of input; False means quit."""
        if not line:
            return True
        if line in ("1", "2"):
            line = "/approve" if line == "1" else "/deny"
        if not line.startswith("/"):
            with tracing.span("local.message", "server", platform="local"):
                try:
                    await self._post(line)
                except Exception as err:  # the thread store cannot take it: nothing was kept
                    log.warning("could not keep a local message: %s", one_line(err))
                    self.say(f"! {NOT_KEPT}")
            return True
        try:
            name, *args = shlex.split(line)
        except ValueError as err:
            self.say(f"! {err}")
            return True
        handler: Callable | None = getattr(self, "cmd_" + name[1:].replace("-", "_"), None)
        if handler is None:
            self.say(f"! unknown command {name}; /help lists them")
            return True
        try:
            inspect.signature(handler).bind(*args)
        except TypeError:  # `/quit now`, `/as a b`: words the command does not take
            self.say(f"! {name} does not take {' '.join(args) or 'nothing'}; /help shows its words")
            return True
        try:
            if name in _TERMINAL_ONLY:  # the terminal's own (who am I, which thread): no trace
                return await handler(*args) is not False
            with tracing.span("local.command", "server", platform="local", command=name):
                return await handler(*args) is not False
        except Exception as err:
            # Temporal or a store not answering: said here, and the channel carries on.
            log.warning("local command %s failed: %s", name, one_line(err))
            self.say(f"! {name} failed on our side ({one_line(err)})")
            return True

    async def _post(self, text: str) -> None:
        if self.thread is None:
            message = await self._threads.open_thread(CHANNEL, self.me.user_id, text)
            self.thread = message.thread_id
            self.say(f"[{self.thread}] {self.me.label} opened a thread: {text}")
        else:
            message = await self._threads.add_reply(self.thread, self.me.user_id, text)
        try:
            routed = await self._router.on_message(inbound(message, self.me))
        except Exception as err:
            # The router keeps what it cannot deliver; this is it failing to keep it.
            log.warning("could not route local message %s: %s", message.message_id, one_line(err))
            self.say(f"[{message.thread_id}] refund-bot (notice): {NOT_KEPT}")
            return
        if notice := FINISHED if routed == Routed.CLOSED else NOTICES.get(routed):
            self.say(f"[{message.thread_id}] refund-bot (notice): {notice}")
        elif routed == Routed.UNKNOWN:
            self.say(f"[{message.thread_id}] (no conversation in this thread)")

    def _workflow_id(self, thread: str | None) -> str | None:
        thread = thread or self.thread
        return workflow_id_for(thread_ref(thread)) if thread else None

    def _reply(self, reply: CommandReply) -> None:
        prefix = "(only you can see this) " if reply.ok else "(only you can see this) ! "
        self.say(prefix + reply.shown().replace("\n", "\n    "))

    # Commands -----------------------------------------------------------------------------

    async def cmd_help(self) -> None:
        self.say(HELP)

    async def cmd_quit(self) -> bool:
        return False

    async def cmd_as(self, who: str = "") -> None:
        if who.lstrip("@") not in PEOPLE:
            self.say(f"! who? one of: {', '.join(PEOPLE)}")
            return
        self.me = PEOPLE[who.lstrip("@")]
        self.say(f"You are now {self.me.label}.")

    async def cmd_new(self) -> None:
        self.thread = None
        self.say("Your next message opens a new thread.")

    async def cmd_threads(self) -> None:
        threads = await self._threads.threads()
        if not threads:
            self.say("No threads yet. Type a message to open one.")
            return
        ids = [workflow_id_for(thread_ref(t.thread_id)) for t in threads]
        try:
            # Whether a conversation is open is Temporal's to say, not this store's.
            states = await self._commands.conversation_states(ids)
        except Exception as err:
            self.say(f"! Temporal did not answer ({err}); the threads, without their state:")
            states = {}
        for thread, workflow_id in zip(threads, ids, strict=True):
            state = STATES.get(states.get(workflow_id, ""), "state unknown")
            here = "  <- you are here" if thread.thread_id == self.thread else ""
            self.say(f"  {thread.thread_id:<5} {state:<9} {thread.opening_text[:50]}{here}")

    async def cmd_thread(self, thread: str = "") -> None:
        if not thread:
            self.thread = None
            self.say("Outside any thread: your next message opens a new one.")
            return
        if thread not in {t.thread_id for t in await self._threads.threads()}:
            self.say(f"! no thread {thread}; /threads lists them")
            return
        self.thread = thread
        self.say(f"In thread {thread}.")

    async def _click(self, decision: Literal["approve", "deny"]) -> None:
        thread = self.thread
        if thread is None:
            self.say("! no thread: /thread t1 first")
            return
        workflow_id = workflow_id_for(thread_ref(thread))
        self._clicks += 1
        click_id = f"{workflow_id}:{self.me.user_id}:{self._clicks}"
        click = InboundClick(
            event_id=click_id,
            workflow_id=workflow_id,
            decision=decision,
            actor=self.me,
            click_id=click_id,
            # The numbered choice answers the escalation last shown in this thread.
            round=self._rounds.get(thread),
        )
        await on_click(click, self._may_approve, self._router, TypedChoice(self.say, thread, click))

    async def cmd_approve(self) -> None:
        await self._click("approve")

    async def cmd_deny(self) -> None:
        await self._click("deny")

    async def cmd_crash_worker(self, host: str | None = None) -> None:
        self.say("Crashing the Worker (SIGKILL) ...")
        self._reply(await self._commands.crash_worker(self.me, host))

    async def cmd_refund_status(self, thread: str | None = None) -> None:
        workflow_id = self._workflow_id(thread)
        if workflow_id is None:
            self.say("! which thread? /refund-status t1")
            return
        self._reply(await self._commands.refund_status(self.me, workflow_id))

    async def cmd_refund_release(self, thread: str | None = None) -> None:
        workflow_id = self._workflow_id(thread)
        if workflow_id is None:
            self.say("! which thread? /refund-release t1")
            return
        self._reply(await self._commands.refund_release(self.me, workflow_id))

    async def cmd_refund_queue(self) -> None:
        self._reply(await self._commands.refund_queue(self.me))

    async def cmd_refund_takeover(self, thread: str | None = None) -> None:
        await self._take_over(thread, taken=True)

    async def cmd_refund_handback(self, thread: str | None = None) -> None:
        await self._take_over(thread, taken=False)

    async def _take_over(self, thread: str | None, *, taken: bool) -> None:
        workflow_id = self._workflow_id(thread)
        if workflow_id is None:
            self.say(f"! which thread? /refund-{'takeover' if taken else 'handback'} t1")
            return
        self._reply(await self._commands.refund_takeover(self.me, workflow_id, taken))

    async def cmd_refund_demo(self, *words: str) -> None:
        def stage(stages: DemoStages) -> DemoStage:
            return stages.local(self._threads)

        channel = ChannelRef(platform="local", workspace=LOCAL_WORKSPACE, channel=CHANNEL)
        self._reply(await self._commands.refund_demo(self.me, " ".join(words), stage, channel))

    async def cmd_refund_hold(self, state: str | None = None) -> None:
        enabled = None if state is None else state.lower() in ("on", "true", "yes", "1")
        self._reply(await self._commands.refund_hold(self.me, enabled))

    def _person(self, user: str, usage: str) -> Actor | None:
        """`@support` -> that person; anyone else is refused: the local channel has four."""
        person = PEOPLE.get(user.lstrip("@").lower())
        if not user:
            self.say(f"! usage: {usage}")
        elif person is None:
            self.say(f"! no one here is called {user}: one of @{', @'.join(PEOPLE)}")
        return person

    async def cmd_refund_grant(
        self, user: str = "", role: str = "", limit: str | None = None
    ) -> None:
        usage = "/refund-grant @user role [limit]"
        if (target := self._person(user, usage)) is None:
            return
        if not role:
            self.say(f"! usage: {usage}")
            return
        self._reply(await self._commands.refund_grant(self.me, target, role, limit))

    async def cmd_refund_revoke(self, user: str = "", role: str = "") -> None:
        usage = "/refund-revoke @user role"
        if (target := self._person(user, usage)) is None:
            return
        if not role:
            self.say(f"! usage: {usage}")
            return
        self._reply(await self._commands.refund_revoke(self.me, target, role))


async def _stdin_reader() -> asyncio.StreamReader:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    return reader
