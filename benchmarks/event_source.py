"""A cheap server with a known schedule, for measuring clients: an OpenAI completions stream whose
first chunk leaves `ttft_ms` after the request and every next one on the next tick of a global
clock (`step_ms`), `tokens_per_chunk` tokens each, until `max_tokens`. With `--events-per-write K`
each tick writes K such events in one write (llama-server's shape under speculation: a verify
step's accepted tokens as one event each, sent together; vLLM's is one event with several tokens).
Every event's send time is logged (perf_counter_ns, the system-wide monotonic clock the client
stamps with) twice: just before its write (`send_ns`) and just after it (`done_ns`; null when the
write was left in the transport's buffer, so the bytes went later), and written, per process, to
`<log_dir>/truth-<pid>.jsonl` when the process gets SIGTERM. On loopback the kernel stamps a
packet inside the sender's write, so an event's arrival at the client's socket lies between the two.

Several processes can serve one port (`--reuse-port`): the kernel spreads connections over them.
Why not the simulator: one simulator process tops out at ~70-78k events/s with its model and
engine loop; this one does nothing but write bytes on a schedule.

    python benchmarks/event_source.py --port 0 --log-dir /tmp/truth [--reuse-port] [--cpu 0]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import signal
import socket
import sys
from pathlib import Path
from time import perf_counter_ns

READY = "event source listening on "


class Stream:
    __slots__ = ("transport", "rid", "left", "sends", "dones", "due_ns")

    def __init__(self, transport: asyncio.Transport, rid: str, tokens: int, due_ns: int) -> None:
        self.transport, self.rid, self.left, self.due_ns = transport, rid, tokens, due_ns
        self.sends: list[int] = []
        self.dones: list[int | None] = []


class Source:
    def __init__(self, step_ms: float, ttft_ms: float, per_chunk: int, per_write: int = 1) -> None:
        self.step_ns, self.ttft_ns, self.per_chunk = int(step_ms * 1e6), int(ttft_ms * 1e6), per_chunk
        self.per_write = per_write
        self.live: list[Stream] = []
        self.done: list[Stream] = []

    def burst(self, s: Stream) -> tuple[bytes, int]:
        """The next write of stream `s`: up to `per_write` events (fewer at its end), and how many."""
        out, k = b"", 0
        while s.left and k < self.per_write:
            out += self.chunk(s)
            k += 1
        return out, k

    def chunk(self, s: Stream) -> bytes:
        """The next event of `s`, framed as one HTTP chunk (its end too, after the last). The bytes of an
        event depend only on the stream, its token count and whether it is the last, so they are built
        once (`_event`): the source must stay far from saturating its core, or its kernel delivers
        loopback packets late (softirq work deferred on a busy CPU) and the client sees bursts it did
        not cause."""
        n = min(self.per_chunk, s.left)
        s.left -= n
        return self._event(s.rid, n, s.left == 0)

    @functools.lru_cache(maxsize=8192)  # noqa: B019 - one Source per process, for its whole life
    def _event(self, rid: str, n: int, last: bool) -> bytes:
        choice = {"index": 0, "text": " w" * n, "token_ids": list(range(1, n + 1)),
                  "finish_reason": "length" if last else None}
        event = {"id": rid, "object": "text_completion", "model": "m", "choices": [choice]}
        data = b"data: " + json.dumps(event, separators=(",", ":")).encode() + b"\n\n"
        if last:
            data += b"data: [DONE]\n\n"
        return b"%x\r\n%s\r\n" % (len(data), data) + (b"0\r\n\r\n" if last else b"")

    async def tick(self) -> None:
        """Every step: each stream that is due gets its next chunk, in one burst (an engine step)."""
        nxt = perf_counter_ns()
        while True:
            nxt += self.step_ns
            await asyncio.sleep(max(0.0, (nxt - perf_counter_ns()) / 1e9))
            now = perf_counter_ns()
            keep = []
            for s in self.live:
                if s.due_ns > now:
                    keep.append(s)
                    continue
                if s.transport.is_closing():
                    continue
                data, k = self.burst(s)
                t = perf_counter_ns()
                s.transport.write(data)
                after = perf_counter_ns() if not s.transport.get_write_buffer_size() else None
                s.sends += [t] * k
                s.dones += [after] * k
                (keep if s.left else self.done).append(s)
            self.live = keep


class Conn(asyncio.Protocol):
    def __init__(self, src: Source) -> None:
        self.src, self.buf, self.transport = src, b"", None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            k = self.buf.find(b"\r\n\r\n")
            if k < 0:
                return
            head = self.buf[:k].decode("latin-1")
            length, rid, tokens = 0, "", 60
            for line in head.split("\r\n")[1:]:
                name, _, value = line.partition(":")
                if name.lower() == "content-length":
                    length = int(value)
                elif name.lower() == "x-request-id":
                    rid = value.strip()
            if len(self.buf) < k + 4 + length:
                return
            body, self.buf = self.buf[k + 4:k + 4 + length], self.buf[k + 4 + length:]
            method = head.split(" ", 1)[0]
            if method != "POST":
                self.transport.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
                continue
            try:
                tokens = int(json.loads(body).get("max_tokens", tokens))
            except (ValueError, AttributeError):
                pass
            self.transport.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                                 b"Transfer-Encoding: chunked\r\n\r\n")
            self.src.live.append(Stream(self.transport, rid, tokens, perf_counter_ns() + self.src.ttft_ns))


async def serve(a: argparse.Namespace) -> None:
    src = Source(a.step_ms, a.ttft_ms, a.tokens_per_chunk, a.events_per_write)
    loop = asyncio.get_running_loop()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if a.reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind(("127.0.0.1", a.port))
    server = await loop.create_server(lambda: Conn(src), sock=sock, backlog=8192)
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    ticker = asyncio.create_task(src.tick())
    print(READY + f"http://127.0.0.1:{sock.getsockname()[1]}", flush=True)
    await stop.wait()
    ticker.cancel()
    server.close()
    log = Path(a.log_dir) / f"truth-{os.getpid()}.jsonl"
    with open(log, "w") as f:
        for s in src.done + src.live:
            f.write(json.dumps({"request_id": s.rid, "send_ns": s.sends, "done_ns": s.dones}) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--log-dir", required=True)
    ap.add_argument("--step-ms", type=float, default=20.0)
    ap.add_argument("--ttft-ms", type=float, default=50.0)
    ap.add_argument("--tokens-per-chunk", type=int, default=3)
    ap.add_argument("--events-per-write", type=int, default=1,
                    help="events per write (llama-server's burst shape: e.g. 4 with --tokens-per-chunk 1)")
    ap.add_argument("--reuse-port", action="store_true")
    ap.add_argument("--cpu", type=int, action="append", help="pin to this CPU (repeatable)")
    a = ap.parse_args()
    if a.cpu:
        os.sched_setaffinity(0, set(a.cpu))
    try:
        import uvloop

        uvloop.install()
    except ImportError:  # pragma: no cover
        pass
    asyncio.run(serve(a))
    sys.exit(0)


if __name__ == "__main__":
    main()
