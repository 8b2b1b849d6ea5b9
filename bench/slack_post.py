"""Posting into a Slack thread, as the Worker's post_to_thread does: a connection per call or one
kept alive (bot.slack.web_client).

    measure process: SlackThreadPoster.post, variants alternated post by post
      -> relay process (with --rtt: holds each chunk half the round trip, each way)
      -> fake Slack Web API over TLS (harness.fakes.slack_api), in that same process

Variants:
  per-call    slack_sdk's behaviour given no session, which every Slack client had before: each
              of a post's two calls (the read for an earlier attempt, chat.postMessage) opens a
              TCP connection and a TLS handshake, then closes them. Measured with the same
              SlackThreadPoster after close(), which leaves it that way.
  kept-alive  SlackThreadPoster now: one session, its connection reused by every call.

Each post goes to a thread of its own (the read for an earlier attempt reads the same every time).
Figures: milliseconds per post (p50 / p95) and the measuring process's CPU per post (median); the
fake, the relay and TLS's other end are another process, as Slack is. The certificate is
self-signed, made here; the measuring process trusts it through SSL_CERT_FILE, so the poster runs
unmodified. The relay delays the bytes of each direction, so a TLS handshake pays its round trip;
TCP's own handshake is answered by the relay's kernel at once, so the per-call figures with --rtt
are a lower bound on what Slack's distance costs them (one round trip a call too few).

    .venv/bin/python -m bench.slack_post [--posts 300] [--rtt 0 20]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import ipaddress
import json
import os
import signal
import ssl
import statistics
import sys
import tempfile
import time
from pathlib import Path

from yarl import URL

from bench import percentile, run_benchmark
from harness import NO_PROXY
from worker.lifecycle import spawn_child, until_stopped, watch_lifeline

HOST = "127.0.0.1"
CHANNEL = "C0SUPPORT"
VARIANTS = ("per-call", "kept-alive")


def self_signed(directory: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and its key, as PEM files in `directory`."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, HOST)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(HOST))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


# ---------------------------------------------------------------------------------------------
# The server process: the fake Slack over TLS, and the relay in front of it
# ---------------------------------------------------------------------------------------------


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float) -> None:
    """Copy one direction, each chunk written `delay` seconds after it was read, in order."""
    loop = asyncio.get_running_loop()
    chunks: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()  # (when to write, bytes)

    async def deliver() -> None:
        while True:
            when, chunk = await chunks.get()
            await asyncio.sleep(when - loop.time())  # the emulated distance, not a wait for state
            if not chunk:
                return  # the end, after every chunk read before it
            writer.write(chunk)

    delivering = asyncio.create_task(deliver())
    try:
        while chunk := await reader.read(65536):
            chunks.put_nowait((loop.time() + delay, chunk))
        chunks.put_nowait((loop.time() + delay, b""))
        await delivering
    finally:
        delivering.cancel()
        writer.close()


async def _relay(upstream_port: int, delay: float) -> asyncio.Server:
    async def connected(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(HOST, upstream_port)
        with contextlib.suppress(asyncio.CancelledError):  # the relay stops: so does this copy
            await asyncio.gather(
                _pipe(reader, up_writer, delay),
                _pipe(up_reader, writer, delay),
                return_exceptions=True,
            )

    return await asyncio.start_server(connected, HOST, 0)


async def serve(cert: Path, key: Path, rtt_ms: float) -> None:
    from harness.fakes.slack_api import FakeSlackApi

    watch_lifeline()
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    async with FakeSlackApi(ssl=context) as slack:
        url = slack.url
        relay = None
        if rtt_ms > 0:
            relay = await _relay(int(URL(url).port or 443), rtt_ms / 2000)
            url = f"https://{HOST}:{relay.sockets[0].getsockname()[1]}/api/"
        print(json.dumps({"url": url, "token": slack.token}), flush=True)
        await until_stopped(asyncio.Event().wait())
        if relay is not None:
            relay.close()


# ---------------------------------------------------------------------------------------------
# The measuring process
# ---------------------------------------------------------------------------------------------


async def measure(url: str, token: str, posts: int) -> None:
    from slack_sdk.web.async_client import AsyncWebClient

    from agent.models import MessageKey, OutboundMessage, ThreadRef
    from bot.slack.outbound import SlackThreadPoster

    watch_lifeline()
    roots_client = AsyncWebClient(token=token, base_url=url)
    per_call = SlackThreadPoster(token, url)
    await per_call.close()  # from here on a session per call, as slack_sdk without one
    samples: dict[str, list[tuple[float, float]]] = {v: [] for v in VARIANTS}
    async with SlackThreadPoster(token, url) as kept_alive:
        posters = {"per-call": per_call, "kept-alive": kept_alive}
        warm_up = await roots_client.chat_postMessage(channel=CHANNEL, text="warm-up")
        for poster in posters.values():  # a first call pays for what every later one reuses
            await poster.find_posted(CHANNEL, warm_up["ts"], "warm-up")
        for i in range(posts):
            for variant in VARIANTS if i % 2 else reversed(VARIANTS):
                root = await roots_client.chat_postMessage(channel=CHANNEL, text=f"refund {i}")
                thread = ThreadRef(
                    platform="slack", workspace="T0FAKE", channel=CHANNEL, thread=root["ts"]
                )
                message = OutboundMessage(
                    thread=thread,
                    key=MessageKey(workflow_id=f"bench-{root['ts']}", run_id="r", seq=1),
                    kind="question",
                    text="Which order is this about?",
                )
                cpu, wall = time.process_time(), time.perf_counter()
                await posters[variant].post(message)
                samples[variant].append((time.perf_counter() - wall, time.process_time() - cpu))
    print(json.dumps(samples), flush=True)


# ---------------------------------------------------------------------------------------------
# The run: one server and one measuring process per round-trip time
# ---------------------------------------------------------------------------------------------


async def _child(argv: list[str], env: dict[str, str] | None = None) -> asyncio.subprocess.Process:
    return await spawn_child(
        [sys.executable, "-m", "bench.slack_post", *argv],
        on_parent_death=signal.SIGTERM,
        lifeline=True,
        stdout=asyncio.subprocess.PIPE,
        env=env,
    )


async def _one(cert: Path, key: Path, rtt_ms: float, posts: int) -> dict[str, list[list[float]]]:
    server = await _child(["serve", "--cert", str(cert), "--key", str(key), "--rtt", str(rtt_ms)])
    try:
        assert server.stdout is not None
        started = json.loads(await asyncio.wait_for(server.stdout.readline(), timeout=60))
        # The certificate is trusted from the start: aiohttp builds its TLS context on import.
        env = {**os.environ, **NO_PROXY, "SSL_CERT_FILE": str(cert)}
        argv = ["measure", "--url", started["url"], "--token", started["token"]]
        measurer = await _child([*argv, "--posts", str(posts)], env)
        out, _ = await measurer.communicate()
        if measurer.returncode != 0:
            raise SystemExit(f"the measuring process failed (exit {measurer.returncode})")
        return json.loads(out.decode().strip().splitlines()[-1])
    finally:
        if server.returncode is None:
            server.send_signal(signal.SIGTERM)
        await asyncio.wait_for(server.wait(), timeout=30)


async def run(posts: int, rtts: list[float]) -> None:
    print(
        f"SlackThreadPoster.post over TLS on loopback, {posts} posts a variant, alternated; "
        "each post is two Web API calls"
    )
    with tempfile.TemporaryDirectory() as directory:
        cert, key = self_signed(Path(directory))
        for rtt in rtts:
            samples = await _one(cert, key, rtt, posts)
            print(f"round trip added by the relay: {rtt:g} ms")
            medians = {}
            for variant in VARIANTS:
                walls = [wall * 1000 for wall, _ in samples[variant]]
                cpu = statistics.median(c * 1000 for _, c in samples[variant])
                medians[variant] = statistics.median(walls)
                print(
                    f"  {variant:<11} ms per post p50 {medians[variant]:7.2f}  "
                    f"p95 {percentile(walls, 95):7.2f}   CPU per post (this process) "
                    f"{cpu:5.2f} ms"
                )
            ratio = medians["per-call"] / medians["kept-alive"]
            print(f"  per-call / kept-alive, p50: {ratio:.2f}x")


def main() -> None:
    if sys.argv[1:2] == ["serve"]:
        parser = argparse.ArgumentParser()
        parser.add_argument("--cert", type=Path, required=True)
        parser.add_argument("--key", type=Path, required=True)
        parser.add_argument("--rtt", type=float, default=0.0)
        args = parser.parse_args(sys.argv[2:])
        run_benchmark(serve(args.cert, args.key, args.rtt))
    if sys.argv[1:2] == ["measure"]:
        parser = argparse.ArgumentParser()
        parser.add_argument("--url", required=True)
        parser.add_argument("--token", required=True)
        parser.add_argument("--posts", type=int, required=True)
        args = parser.parse_args(sys.argv[2:])
        run_benchmark(measure(args.url, args.token, args.posts))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--posts", type=int, default=300, help="posts per variant and round trip")
    parser.add_argument(
        "--rtt", type=float, nargs="+", default=[0.0, 20.0], help="round trips to add, in ms"
    )
    args = parser.parse_args()
    run_benchmark(run(args.posts, args.rtt))


if __name__ == "__main__":
    main()
