"""The hot path: a minimal HTTP/1.1 client that stamps every socket read before any parsing.

Why not aiohttp here: aiohttp parses HTTP inside `data_received` and the caller's coroutine sees
the bytes only after a task switch, so its stamps trail the socket read (measured on the 2-core
machine: +0.4 ms at p50 for one stream against the simulator; see benchmarks/client_overhead.py).
This protocol's `data_received` takes `perf_counter_ns()` first, keeps the raw bytes, and only
walks chunk-size lines to know when the response ends (no copying, no decoding). De-chunking,
header parsing and everything else happen after the response is complete. aiohttp stays the
client for every other route (introspection, /metrics, /tokenize) and is available for the hot
path too with `load.transport: aiohttp`.

Supported: HTTP/1.1 over TCP or TLS, keep-alive connection reuse (a pool per host), responses
framed by `Transfer-Encoding: chunked`, `Content-Length`, or connection close.
"""

from __future__ import annotations

import asyncio
import ssl
from dataclasses import dataclass, field
from time import perf_counter_ns
from urllib.parse import urlsplit

_HDR_END = b"\r\n\r\n"


class ChunkWalker:
    """Walks `Transfer-Encoding: chunked` framing. With `collect`, returns the payload pieces of
    each fed buffer; without, only tracks where the message ends (the hot-path mode)."""

    __slots__ = ("remaining", "line", "state", "done", "collect")

    def __init__(self, collect: bool) -> None:
        self.remaining = 0  # payload bytes left in the current chunk (+2 for its CRLF)
        self.line = b""  # a partial chunk-size line
        self.state = 0  # 0: reading a size line, 1: inside a chunk, 2: reading trailers
        self.done = False
        self.collect = collect

    def feed(self, data: bytes) -> list[bytes]:
        out: list[bytes] = []
        i, n = 0, len(data)
        while i < n and not self.done:
            if self.state == 1:
                take = min(self.remaining, n - i)
                if self.collect:
                    payload = take - max(0, 2 - (self.remaining - take))  # exclude the trailing CRLF
                    if payload > 0:
                        out.append(data[i:i + payload])
                self.remaining -= take
                i += take
                if self.remaining == 0:
                    self.state = 0
                continue
            j = data.find(b"\n", i)
            if j < 0:
                self.line += data[i:]
                break
            line = (self.line + data[i:j]).rstrip(b"\r")
            self.line = b""
            i = j + 1
            if self.state == 2:
                if not line:
                    self.done = True
                continue
            size = int(line.split(b";", 1)[0] or b"0", 16)
            if size == 0:
                self.state = 2
            else:
                self.state, self.remaining = 1, size + 2
        return out


@dataclass
class Response:
    """A finished exchange: the reads as they came, and the parsed view of them."""

    status: int | None = None
    headers: dict[str, str] = field(default_factory=dict)
    headers_ns: int | None = None
    body: list[tuple[int, bytes]] = field(default_factory=list)  # payload pieces, stamped
    complete: bool = False


class _Conn(asyncio.Protocol):
    """One keep-alive connection; serves one exchange at a time."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.reads: list[tuple[int, bytes]] = []
        self.done: asyncio.Future[None] | None = None
        self.closed = False
        self._head = b""
        self._mode = 0  # 0: headers pending, 1: chunked, 2: content-length, 3: until close
        self._left = 0
        self._walker: ChunkWalker | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def begin(self) -> asyncio.Future[None]:
        self.reads = []
        self._head, self._mode, self._left, self._walker = b"", 0, 0, None
        self.done = asyncio.get_running_loop().create_future()
        return self.done

    def data_received(self, data: bytes) -> None:
        self.reads.append((perf_counter_ns(), data))
        if self._mode == 0:
            self._head += data
            k = self._head.find(_HDR_END)
            if k < 0:
                return
            self._frame(self._head[:k])
            data, self._head = self._head[k + 4:], b""
        if self._mode == 1:
            assert self._walker is not None
            self._walker.feed(data)
            if self._walker.done:
                self._finish()
        elif self._mode == 2:
            self._left -= len(data)
            if self._left <= 0:
                self._finish()

    def _frame(self, head: bytes) -> None:
        low = head.lower()
        if b"transfer-encoding: chunked" in low:
            self._mode, self._walker = 1, ChunkWalker(collect=False)
            return
        k = low.find(b"content-length:")
        if k >= 0:
            self._mode = 2
            self._left = int(low[k + 15:].split(b"\r\n", 1)[0].strip())
        else:
            self._mode = 3
        status = head[9:12]
        if status in (b"204", b"304") or (self._mode == 2 and self._left == 0):
            self._finish()

    def _finish(self) -> None:
        if self.done is not None and not self.done.done():
            self.done.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.done is not None and not self.done.done():
            if self._mode == 3:
                self.done.set_result(None)
            else:
                self.done.set_exception(ConnectionResetError("connection closed before the response ended"))


def parse_response(reads: list[tuple[int, bytes]]) -> Response:
    """Parse stamped raw reads (after the exchange) into status, headers and stamped payload."""
    r = Response()
    head = b""
    k, idx = -1, 0
    while idx < len(reads):
        t, data = reads[idx]
        head += data
        k = head.find(_HDR_END)
        if k >= 0:
            r.headers_ns = t
            break
        idx += 1
    if k < 0:
        return r
    lines = head[:k].decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    r.status = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else None
    for line in lines[1:]:
        name, _, value = line.partition(":")
        r.headers[name.strip().lower()] = value.strip()
    rest = [(reads[idx][0], head[k + 4:])] + reads[idx + 1:]
    if "chunked" in r.headers.get("transfer-encoding", "").lower():
        w = ChunkWalker(collect=True)
        for t, data in rest:
            for piece in w.feed(data):
                r.body.append((t, piece))
        r.complete = w.done
    else:
        want = int(r.headers["content-length"]) if "content-length" in r.headers else None
        got = 0
        for t, data in rest:
            if want is not None:
                data = data[: max(0, want - got)]
            if data:
                r.body.append((t, data))
                got += len(data)
        r.complete = want is None or got >= want
    return r


class Pool:
    """Keep-alive connections to one origin, created on demand, never limited in number."""

    def __init__(self, url: str) -> None:
        u = urlsplit(url)
        self.host = u.hostname or "127.0.0.1"
        self.port = u.port or (443 if u.scheme == "https" else 80)
        self.ssl: ssl.SSLContext | None = ssl.create_default_context() if u.scheme == "https" else None
        self.path = (u.path or "/") + (f"?{u.query}" if u.query else "")
        self.idle: list[_Conn] = []

    async def acquire(self) -> _Conn:
        while self.idle:
            c = self.idle.pop()
            if not c.closed:
                return c
        loop = asyncio.get_running_loop()
        _, conn = await loop.create_connection(_Conn, self.host, self.port, ssl=self.ssl)
        return conn

    def release(self, c: _Conn, reusable: bool) -> None:
        if reusable and not c.closed:
            self.idle.append(c)
        elif c.transport is not None:
            c.transport.close()

    def close(self) -> None:
        for c in self.idle:
            if c.transport is not None:
                c.transport.close()
        self.idle.clear()

    def request_bytes(self, body: bytes, headers: dict[str, str]) -> bytes:
        extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        return (f"POST {self.path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n{extra}\r\n").encode() + body
