"""The gateway half of the fake Discord: a websocket speaking Discord's gateway protocol v10.

    connect -> HELLO -> IDENTIFY -> READY, GUILD_CREATE -> dispatches (s = 1, 2, …) ... -> close
    connect -> HELLO -> RESUME (session, seq) -> the dispatches after seq again -> RESUMED

FakeDiscordAPI serves it at /gateway next to its REST API and feeds it what Discord would
dispatch: a member's message (MESSAGE_CREATE), a click or a slash command (INTERACTION_CREATE),
and what the bot itself did over REST (its messages, the threads it opened). What this fake does
the way Discord does it:

- `?v=10&encoding=json` are required (4012 Invalid API version otherwise); `compress=zlib-stream`
  compresses every message the gateway sends with one zlib context for the whole connection, each
  message flushed with Z_SYNC_FLUSH (so it ends in 00 00 ff ff), sent in binary frames; a large
  message is split over two frames, as Discord does, and the client must join them.
- HELLO carries `heartbeat_interval`; every HEARTBEAT (op 1) is answered with HEARTBEAT_ACK (op 11).
- IDENTIFY: a wrong token closes with 4004 Authentication failed; the Message Content intent
  without the application's GATEWAY_MESSAGE_CONTENT(_LIMITED) flag closes with 4014 Disallowed
  intent(s); a second IDENTIFY on one connection closes with 4005. Each IDENTIFY is recorded
  (without its token) so a test can assert the intents the bot asked for.
- Intents decide what is dispatched: guild message events need GUILD_MESSAGES, and without
  MESSAGE_CONTENT a message's content, embeds, attachments and components arrive empty (except
  the bot's own messages and messages that mention it); channel and thread events need GUILDS;
  INTERACTION_CREATE needs none.
- READY names the guilds as unavailable and gives a `resume_gateway_url` on a discord.gg host, as
  Discord does: a client that honours DISCORD_GATEWAY_URL must not resume there (it is out of
  reach in a test). One GUILD_CREATE per guild follows.
- RESUME replays every dispatch of the session after the client's `seq`, then RESUMED; an unknown
  session gets INVALID_SESSION (op 9, d=false). Events dispatched while a session has no
  connection are kept for its RESUME, as Discord keeps them.

Test controls: `refuse_connections(n)` answers the next connection attempts with HTTP 503;
`request_reconnect(redeliver_from=…)` sends RECONNECT (op 7) and makes the next RESUME replay from
that sequence number too (Discord delivers at least once: a client may see an event twice);
`invalidate_sessions()`; `close_connections(code)`, and `close_every_connection_after_hello` (a
broken proxy between bot and Discord); `sent(event)` lists what was dispatched, with
sequence numbers, and `replayed()` what a RESUME sent again.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
import zlib
from dataclasses import dataclass, field
from typing import Any, Protocol

from aiohttp import WSMsgType, web

GATEWAY_PATH = "/gateway"


class Guilds(Protocol):
    """What the gateway reads of the REST fake's state (FakeDiscordAPI has it all)."""

    token: str
    bot_user: dict[str, Any]
    application: dict[str, Any]

    def guild_ids(self) -> list[int]: ...

    def guild_create_event(self, guild_id: int) -> dict[str, Any]: ...


# What Discord says in READY; resolvable only on the internet, so a client that resumes there
# instead of at its configured gateway URL fails loudly in a test.
RESUME_GATEWAY_URL = "wss://gateway-us-east1-c.discord.gg"
HEARTBEAT_INTERVAL_MS = 41250  # Discord's usual value
SPLIT_ABOVE = 512  # compressed messages larger than this go out in two binary frames
SYNC_FLUSH_SUFFIX = b"\x00\x00\xff\xff"

# Opcodes
DISPATCH, HEARTBEAT, IDENTIFY, RESUME, RECONNECT, INVALID_SESSION, HELLO, HEARTBEAT_ACK = (
    0,
    1,
    2,
    6,
    7,
    9,
    10,
    11,
)
# Intents (bit values)
GUILDS = 1 << 0
GUILD_MESSAGES = 1 << 9
MESSAGE_CONTENT = 1 << 15
# Application flags: the Message Content intent is switched on in the Developer Portal.
GATEWAY_MESSAGE_CONTENT = 1 << 18
GATEWAY_MESSAGE_CONTENT_LIMITED = 1 << 19

_MESSAGE_EVENTS = frozenset({"MESSAGE_CREATE", "MESSAGE_UPDATE", "MESSAGE_DELETE"})
_GUILD_EVENTS = frozenset({"THREAD_CREATE", "THREAD_UPDATE", "CHANNEL_CREATE", "GUILD_CREATE"})
_CONTENT_FIELDS = {"content": "", "embeds": [], "attachments": [], "components": []}


@dataclass(frozen=True)
class Sent:
    """One dispatch as the gateway numbered it for a session."""

    session_id: str
    seq: int
    event: str
    data: dict[str, Any]


@dataclass(frozen=True)
class _Close:
    """In a connection's outbox: close it with `code`, after what was queued before."""

    code: int


@dataclass
class _Connection:
    socket: web.WebSocketResponse
    compressor: Any | None  # one zlib context per connection, or None (no compression)
    outbox: asyncio.Queue[dict[str, Any] | _Close | None] = field(default_factory=asyncio.Queue)
    session: _Session | None = None


@dataclass
class _Session:
    id: str
    intents: int
    seq: int = 0
    history: list[Sent] = field(default_factory=list)
    connection: _Connection | None = None
    redeliver_from: int | None = None  # the next RESUME replays from here too


class FakeDiscordGateway:
    """The websocket at FakeDiscordAPI.gateway_url; state (guilds, messages) is the API's."""

    def __init__(self, api: Guilds, *, heartbeat_interval_ms: int = HEARTBEAT_INTERVAL_MS):
        self.api = api
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.identifies: list[dict[str, Any]] = []  # IDENTIFY payloads, token left out
        self.resumes: list[dict[str, Any]] = []  # RESUME payloads: session_id, seq
        self.heartbeats = 0
        self.connections_opened = 0
        self.queries: list[dict[str, str]] = []  # each connection's query string
        self.frames: list[WSMsgType] = []  # the type of every frame sent (TEXT or BINARY)
        self.split_messages = 0  # messages sent over two frames
        self.close_every_connection_after_hello = False  # a broken proxy in between, say
        self._refusals = 0
        self._sessions: dict[str, _Session] = {}
        self._connections: list[_Connection] = []
        self._replayed: list[Sent] = []

    # -- what a test asks -------------------------------------------------------------------------

    @property
    def connected(self) -> int:
        """Connections that completed IDENTIFY or RESUME and are still open."""
        return sum(1 for c in self._connections if c.session is not None)

    def sent(self, event: str | None = None) -> list[Sent]:
        """Every dispatch, in order (replays included), optionally of one event type."""
        return [
            s
            for session in self._sessions.values()
            for s in session.history
            if event is None or s.event == event
        ]

    def replayed(self) -> list[Sent]:
        """The dispatches sent again on a RESUME."""
        return list(self._replayed)

    # -- test controls ----------------------------------------------------------------------------

    def dispatch(self, event: str, data: dict[str, Any]) -> None:
        """Send `event` to every session whose intents receive it (kept for a session that is
        between connections, to be replayed on its RESUME)."""
        for session in self._sessions.values():
            shaped = _as_received(event, data, session.intents, self.api.bot_user["id"])
            if shaped is not None:
                self._send_dispatch(session, event, shaped)

    async def request_reconnect(self, *, redeliver_from: int | None = None) -> None:
        """RECONNECT (op 7) to every connection: the client closes and RESUMEs. With
        `redeliver_from`, that RESUME replays from this sequence number even if the client has
        seen those events already."""
        for connection in list(self._connections):
            if connection.session is not None:
                connection.session.redeliver_from = redeliver_from
            self._send(connection, {"op": RECONNECT, "d": None, "s": None, "t": None})

    async def invalidate_sessions(self) -> None:
        """INVALID_SESSION (op 9, d=false) to every connection: the client must IDENTIFY anew."""
        for connection in list(self._connections):
            if connection.session is not None:
                self._sessions.pop(connection.session.id, None)
                connection.session = None
            self._send(connection, {"op": INVALID_SESSION, "d": False, "s": None, "t": None})

    def refuse_connections(self, times: int) -> None:
        """Answer the next `times` connection attempts with HTTP 503 (Discord having a bad day)."""
        self._refusals = times

    async def close_connections(self, code: int = 4000) -> None:
        """Close every connection with `code` (4000-4009: resumable; 4004, 4010-4014: not)."""
        for connection in list(self._connections):
            await connection.socket.close(code=code)

    # -- the websocket ----------------------------------------------------------------------------

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.queries.append(dict(request.query))
        if self._refusals:
            self._refusals -= 1
            return web.Response(status=503, text="upstream connect error")
        socket = web.WebSocketResponse(autoping=True)
        await socket.prepare(request)
        self.connections_opened += 1
        compress = request.query.get("compress")
        if request.query.get("v") != "10" or request.query.get("encoding") != "json":
            await socket.close(code=4012, message=b"Invalid API version")
            return socket
        if compress not in (None, "zlib-stream"):
            await socket.close(code=4000, message=b"Unknown compression")
            return socket
        connection = _Connection(socket, zlib.compressobj() if compress else None)
        self._connections.append(connection)
        writer = asyncio.create_task(self._write(connection))
        try:
            hello = {"heartbeat_interval": self.heartbeat_interval_ms, "_trace": ["fake-gateway"]}
            self._send(connection, {"op": HELLO, "d": hello, "s": None, "t": None})
            if self.close_every_connection_after_hello:
                connection.outbox.put_nowait(_Close(4000))  # once HELLO has gone out
            async for message in socket:
                if message.type != WSMsgType.TEXT:
                    await socket.close(code=4002, message=b"Error while decoding payload.")
                    break
                await self._received(connection, json.loads(message.data))
        finally:
            self._connections.remove(connection)
            if connection.session is not None and connection.session.connection is connection:
                connection.session.connection = None  # the session stays resumable
            connection.outbox.put_nowait(None)
            with contextlib.suppress(asyncio.CancelledError):
                await writer
        return socket

    async def _received(self, connection: _Connection, payload: dict[str, Any]) -> None:
        op, data = payload.get("op"), payload.get("d")
        if op == HEARTBEAT:
            self.heartbeats += 1
            self._send(connection, {"op": HEARTBEAT_ACK, "d": None, "s": None, "t": None})
        elif op == IDENTIFY:
            await self._identify(connection, data or {})
        elif op == RESUME:
            await self._resume(connection, data or {})
        else:
            await connection.socket.close(code=4001, message=b"Unknown opcode.")

    async def _identify(self, connection: _Connection, data: dict[str, Any]) -> None:
        if connection.session is not None:
            await connection.socket.close(code=4005, message=b"Already authenticated.")
            return
        self.identifies.append({k: v for k, v in data.items() if k != "token"})
        if data.get("token") != self.api.token:
            await connection.socket.close(code=4004, message=b"Authentication failed.")
            return
        intents = int(data.get("intents", 0))
        flags = int(self.api.application["flags"])
        content_allowed = flags & (GATEWAY_MESSAGE_CONTENT | GATEWAY_MESSAGE_CONTENT_LIMITED)
        if intents & MESSAGE_CONTENT and not content_allowed:
            await connection.socket.close(code=4014, message=b"Disallowed intent(s).")
            return
        session = _Session(id=uuid.uuid4().hex, intents=intents)
        self._sessions[session.id] = session
        session.connection, connection.session = connection, session
        guild_ids = self.api.guild_ids()
        ready = {
            "v": 10,
            "user_settings": {},
            "user": {**self.api.bot_user, "verified": True, "mfa_enabled": False},
            "session_type": "normal",
            "session_id": session.id,
            "resume_gateway_url": RESUME_GATEWAY_URL,
            "relationships": [],
            "private_channels": [],
            "presences": [],
            "guilds": [{"id": str(g), "unavailable": True} for g in guild_ids],
            "guild_join_requests": [],
            "geo_ordered_rtc_regions": ["rotterdam", "frankfurt"],
            "auth": {},
            "application": {"id": self.api.application["id"], "flags": flags},
            "_trace": ["fake-gateway"],
        }
        self._send_dispatch(session, "READY", ready)
        for guild_id in guild_ids:  # sent whatever the intents, as Discord does after READY
            self._send_dispatch(session, "GUILD_CREATE", self.api.guild_create_event(guild_id))

    async def _resume(self, connection: _Connection, data: dict[str, Any]) -> None:
        self.resumes.append({"session_id": data.get("session_id"), "seq": data.get("seq")})
        if data.get("token") != self.api.token:
            await connection.socket.close(code=4004, message=b"Authentication failed.")
            return
        session = self._sessions.get(str(data.get("session_id")))
        if session is None:
            self._send(connection, {"op": INVALID_SESSION, "d": False, "s": None, "t": None})
            return
        if session.connection is not None and session.connection is not connection:
            await session.connection.socket.close(code=4000)  # a session has one connection
        session.connection, connection.session = connection, session
        after = int(data.get("seq") or 0)
        if session.redeliver_from is not None:
            after = min(after, session.redeliver_from - 1)
            session.redeliver_from = None
        for sent in [s for s in session.history if s.seq > after]:
            self._replayed.append(sent)
            self._send(connection, {"op": DISPATCH, "s": sent.seq, "t": sent.event, "d": sent.data})
        self._send_dispatch(session, "RESUMED", {"_trace": ["fake-gateway"]})

    # -- sending ----------------------------------------------------------------------------------

    def _send_dispatch(self, session: _Session, event: str, data: dict[str, Any]) -> None:
        session.seq += 1
        sent = Sent(session.id, session.seq, event, json.loads(json.dumps(data)))
        session.history.append(sent)
        if session.connection is not None:
            self._send(session.connection, {"op": DISPATCH, "s": sent.seq, "t": event, "d": data})

    def _send(self, connection: _Connection, payload: dict[str, Any]) -> None:
        """Queue a payload for the connection's writer, behind everything queued before it."""
        connection.outbox.put_nowait(payload)

    async def _write(self, connection: _Connection) -> None:
        """The one writer of a connection: messages leave in the order they were queued."""
        while (payload := await connection.outbox.get()) is not None:
            if isinstance(payload, _Close):
                await connection.socket.close(code=payload.code)
                return
            text = json.dumps(payload, separators=(",", ":"))
            try:
                if connection.compressor is None:
                    await connection.socket.send_str(text)
                    self.frames.append(WSMsgType.TEXT)
                    continue
                data = connection.compressor.compress(text.encode())
                data += connection.compressor.flush(zlib.Z_SYNC_FLUSH)
                assert data.endswith(SYNC_FLUSH_SUFFIX)
                frames = _frames(data)
                self.split_messages += len(frames) > 1
                for frame in frames:
                    await connection.socket.send_bytes(frame)
                    self.frames.append(WSMsgType.BINARY)
            except ConnectionResetError:
                return  # the client went away; what it missed waits for its RESUME


def _frames(data: bytes) -> list[bytes]:
    """One frame, or two for a large message; the first never ends like a whole message."""
    if len(data) <= SPLIT_ABOVE:
        return [data]
    cut = len(data) // 2
    while data[:cut].endswith(SYNC_FLUSH_SUFFIX):
        cut -= 1
    return [data[:cut], data[cut:]]


def _as_received(
    event: str, data: dict[str, Any], intents: int, bot_id: str
) -> dict[str, Any] | None:
    """The event as a session with `intents` receives it, or None when it does not receive it."""
    if event in _MESSAGE_EVENTS:
        if "guild_id" in data and not intents & GUILD_MESSAGES:
            return None
        if event == "MESSAGE_DELETE" or intents & MESSAGE_CONTENT:
            return data
        author = (data.get("author") or {}).get("id")
        mentioned = any(u.get("id") == bot_id for u in data.get("mentions", []))
        if author == bot_id or mentioned or "guild_id" not in data:
            return data
        return {**data, **_CONTENT_FIELDS}
    if event in _GUILD_EVENTS and not intents & GUILDS:
        return None
    return data
