"""The hot path: a minimal HTTP/1.1 client that stamps every socket read before any parsing.

Plain-HTTP reads carry the kernel's receive timestamp (see `SocketConn`); TLS reads are stamped
in `data_received`.

Why not aiohttp here: aiohttp parses HTTP inside `data_received` and the caller's coroutine sees
the bytes only after a task switch, so its stamps trail the socket read (measured on the 2-core
machine: 1.1-3.2 ms late at p50 against the simulator where kernel stamps are within 5 µs;
benchmarks/client_overhead.py).
This protocol's `data_received` takes `perf_counter_ns()` first, keeps the raw bytes, and only
walks chunk-size lines to know when the response ends (no copying, no decoding). De-chunking,
header parsing and everything else happen after the response is complete. aiohttp stays the
client for every other route (introspection, /metrics, /tokenize) and is available for the hot
path too with `load.transport: aiohttp`.

Supported: HTTP/1.1 over TCP or TLS, keep-alive connection reuse (a pool per host), responses
framed by `Transfer-Encoding: chunked`, `Content-Length`, or connection close.

Keep-alive as servers really do it: llama-server (cpp-httplib) advertises `Keep-Alive: timeout=5,
max=100`, yet closes the connection after every streamed response (0.3.36: the last chunk, then
EOF), closes one idle for 5 s, and answers a 100th request with `Connection: close`. So against it
each streamed request pays a connect, as it would from any client. A connection the server asked
to close is not reused; one idle longer than the server's `Keep-Alive: timeout=` less a margin is
dropped; an idle one is checked for a pending close before reuse; a request that finds its
reused connection closed with nothing received is sent again once, on a new connection; and after
3 such failed reuses with none that worked, the pool stops reusing (see `Pool.reusing`).
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import struct
import time
from dataclasses import dataclass, field
from time import perf_counter_ns
from urllib.parse import urlsplit

from loadgate.engine.adapters.base import ErrorKind
from loadgate.load.turns import LOOP_TURNS, Turn

_HDR_END = b"\r\n\r\n"
READS_PER_WAKEUP = 4  # the reader returns to the loop after this many full reads, so timers still fire
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)  # Linux value; Python does not export it
_TIMESPEC = struct.Struct("@qq")  # struct timespec on 64-bit Linux
TCP_INFO = getattr(socket, "TCP_INFO", 11)
# struct tcp_info (Linux): tcpi_bytes_received (u64, offset 128) and tcpi_data_segs_in (u32, offset 152)
_TCPI = struct.Struct("<Q16xI")
_TCPI_AT, _TCPI_LEN = 128, 160


class _WallToMono:
    """CLOCK_REALTIME (kernel receive stamps) minus CLOCK_MONOTONIC (`perf_counter_ns`), measured
    between two monotonic reads no more than 20 µs apart and kept for a second. Reading the two
    clocks one after the other on every read is wrong by however long the thread is preempted
    between them (another thread holding the interpreter for a switch interval: 5-30 ms)."""

    def __init__(self) -> None:
        self.offset_ns = 0
        self.until_ns = 0

    def offset(self, mono_now: int) -> int:
        if mono_now >= self.until_ns:
            best = None
            for _ in range(8):
                a = perf_counter_ns()
                real = time.time_ns()
                b = perf_counter_ns()
                if best is None or b - a < best[0]:
                    best = (b - a, real - (a + b) // 2)
                if b - a <= 20_000:
                    break
            assert best is not None
            self.offset_ns, self.until_ns = best[1], b + 1_000_000_000
        return self.offset_ns


WALL_TO_MONO = _WallToMono()


READ_SIZE = 1 << 18
IDLE_MARGIN_NS = 1_000_000_000  # drop an idle connection this long before the server's keep-alive timeout
STALE_REUSES_BEFORE_GIVING_UP = 3


class Refused(Exception):
    """The response broke a limit or HTTP itself: ends the exchange with a named error kind
    (header_too_large, response_too_large, memory_budget, bad_response)."""

    def __init__(self, kind: ErrorKind, detail: str) -> None:
        super().__init__(detail)
        self.kind: ErrorKind = kind
        self.detail = detail


# What one kept read costs beyond its bytes (CPython 3.11, 64-bit): the bytes object's header (33),
# its (stamp, bytes) tuple (56) and int stamp (32), its entry in `read_begin` (a 3-tuple, 64, and
# an int, 32), two list slots with their growth (~20), and its share of the loop turn it was read
# in, kept by that entry (a `Turn` and its ints, ~220, one per read when every wake-up reads one
# socket). A server that sends tiny events, each read alone, holds twenty times its bytes in these:
# the budget counts them (measured: a 64 MiB budget of tiny events took ~170 MB of RSS counted at
# 256 bytes a read, ~90 MB at 512; tests/e2e/test_hardening.py).
READ_OVERHEAD = 512


@dataclass
class MemoryBudget:
    """Bytes held by every in-flight response of one pool together, with what each kept read costs
    beyond its bytes (`READ_OVERHEAD`); `limit` caps the sum. (A finished exchange leaves at once:
    `loadgate.load.exchanges` writes it to the run folder; decoding, after the phase, holds one.)"""

    limit: int
    used: int = 0


@dataclass(frozen=True)
class Limits:
    """What the client accepts from a server (the profile's `target.limits`, in bytes)."""

    max_header_bytes: int = 64 * 1024
    max_response_bytes: int = 32 * 1024 * 1024
    memory_budget_bytes: int = 512 * 1024 * 1024


_HEX_DIGITS = b"0123456789abcdefABCDEF"


def _chunk_size(line: bytes) -> int:
    """A chunk-size line's size (extensions after ';' ignored); Refused when it is not hex (what is
    left once the hex digits are stripped from both ends: any byte but a digit stops the strip, so
    `int`'s own leniencies, a sign, `0x`, `_`, are refused too)."""
    token = line.split(b";", 1)[0].strip()
    if not token or len(token) > 16 or token.strip(_HEX_DIGITS):
        raise Refused("bad_response", f"chunk size line is not hexadecimal: {line[:40]!r}")
    return int(token, 16)


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
        if self.state == 0 and not self.line and not self.done and (j := data.find(b"\n")) > 0:
            # the first size line, as the loop below reads it; and the usual read of a stream, one
            # whole chunk from a chunk boundary, ends here (a third of the walk's time per read)
            size = _chunk_size(data[:j].rstrip(b"\r"))
            if size and j + 3 + size == n:
                if self.collect:
                    out.append(data[j + 1:n - 2])
                return out
            if size == 0:
                self.state = 2
            else:
                self.state, self.remaining = 1, size + 2
            i = j + 1
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
            size = _chunk_size(line)
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


class _Framing:
    """Per-exchange state shared by both connection kinds: the stamped reads and just enough
    framing to know when the response ended; and the limits, checked as bytes arrive (a header
    block that never ends, a response that never stops, more bytes in flight than the budget)."""

    def __init__(self, limits: Limits | None = None, budget: MemoryBudget | None = None) -> None:
        self.reads: list[tuple[int, bytes]] = []
        self.done: asyncio.Future[None] | None = None
        self.closed = False
        self.keep_alive = True  # False for a close-delimited response (see `reusable` for the headers)
        self.head = b""  # the last response's header block, lower-cased
        self.idle_limit_ns: int | None = None  # from the server's `Keep-Alive: timeout=N`
        self.idle_since_ns = 0
        self.user_lag_max_ns = 0  # largest (user-space read time - stamp): how busy the loop was
        # per read: when it began, its loop turn (None for reads outside the turns, e.g. TLS), and
        # whether its bytes came in one TCP segment (see `SocketConn`)
        self.read_begin: list[tuple[int, Turn | None, bool]] = []
        self.sent_ns = 0  # when the request began to be handed to the socket
        self.last_read_ns = 0
        self.limits = limits or Limits()
        self.budget = budget
        self.received = 0  # bytes of this exchange read so far (the response limit)
        self.held = 0  # what they hold in memory, objects included (counted against the budget until `end`)
        self._reset()

    def _reset(self) -> None:
        self._head_parts: list[bytes] = []
        self._head_len = 0
        self._head_tail = b""
        self._mode, self._left, self._tail = 0, 0, b""
        self._body_at = (0, 0)  # (read index, offset) where the body starts
        self._walker: ChunkWalker | None = None
        self._walked = 0

    def begin(self) -> asyncio.Future[None]:
        self.end()
        self.reads = []
        self.read_begin = []
        self.user_lag_max_ns = 0
        self.last_read_ns = perf_counter_ns()
        self._reset()
        self.done = asyncio.get_running_loop().create_future()
        return self.done

    def end(self) -> None:
        """The exchange's bytes no longer count against the memory budget."""
        if self.budget is not None:
            self.budget.used -= self.held
        self.received = self.held = 0

    def _refuse(self, kind: ErrorKind, detail: str) -> None:
        if self.done is not None and not self.done.done():
            self.done.set_exception(Refused(kind, detail))
        self.reads, self.read_begin = [], []  # a refused response is not decoded: its bytes go at once
        self.abort()

    def abort(self) -> None:  # pragma: no cover - each connection kind closes itself
        raise NotImplementedError

    def _on_data(self, t_ns: int, data: bytes, begin: tuple[int, Turn | None, bool]) -> None:
        if self.done is None or self.done.done():
            return  # bytes after the end (or after a refusal): not kept
        self.reads.append((t_ns, data))
        self.read_begin.append(begin)
        self.last_read_ns = t_ns
        n = len(data)
        self.received += n
        if self.budget is not None:
            self.held += n + READ_OVERHEAD
            self.budget.used += n + READ_OVERHEAD
            if self.budget.used > self.budget.limit:
                self._refuse("memory_budget", f"responses in flight hold more than "
                             f"{self.budget.limit // 2**20} MiB together (target.limits.memory_budget_mb)")
                return
        if self.received > self.limits.max_response_bytes:
            self._refuse("response_too_large", f"response longer than {self.limits.max_response_bytes:,} bytes "
                         "(target.limits.max_response_mb)")
            return
        try:
            self._frame_data(data)
        except Refused as e:
            self._refuse(e.kind, e.detail)

    def _frame_data(self, data: bytes) -> None:
        while True:
            if self._mode == 1:
                # Cheap test first: a chunked message can only end with a blank line ("0\r\n\r\n"
                # without trailers); only then walk the framing to be sure.
                tail = self._tail + data[-7:] if len(data) < 7 else data[-7:]
                self._tail = tail[-7:]
                if tail.endswith(b"\r\n\r\n"):
                    self._confirm_end()
                return
            if self._mode == 2:
                self._left -= len(data)
                if self._left <= 0:
                    self._finish()
                return
            if self._mode == 3:
                return
            # mode 0: the header block; only the new bytes (and 3 before them) are searched
            prev = self._head_tail  # the header block's last 3 bytes so far (its parts may be shorter)
            k = (prev + data).find(_HDR_END)
            if k < 0:
                self._head_tail = (prev + data)[-3:]
                self._head_parts.append(data)
                self._head_len += len(data)
                if self._head_len > self.limits.max_header_bytes:
                    raise Refused("header_too_large", f"response headers longer than "
                                  f"{self.limits.max_header_bytes:,} bytes (target.limits.max_header_kib)")
                return
            k -= len(prev)  # where the terminator starts in `data` (may be negative: it began before)
            head = b"".join(self._head_parts) + data[:k + 4]
            if len(head) > self.limits.max_header_bytes + 4:
                raise Refused("header_too_large", f"response headers longer than "
                              f"{self.limits.max_header_bytes:,} bytes (target.limits.max_header_kib)")
            rest = data[k + 4:]
            self._head_parts, self._head_len, self._head_tail = [], 0, b""
            if self._frame(head[:-4]):  # an interim 1xx response: the real one follows
                data = rest
                if not data:
                    return
                continue
            self._body_at = (len(self.reads) - 1, len(self.reads[-1][1]) - len(rest))
            if self._mode in (0, 3) or self.done is None or self.done.done():
                return
            data = rest
            if self._mode == 1:
                self._tail = b""
            if not data:
                return

    def _frame(self, head: bytes) -> bool:
        """Read the framing of one header block; True when it was an interim (1xx) response."""
        status = head[9:12]
        if not head.startswith(b"HTTP/1.") or not status.isdigit():
            raise Refused("bad_response", f"not an HTTP/1.x status line: {head[:40]!r}")
        if status[:1] == b"1" and status != b"101":
            return True  # 100 Continue, 103 Early Hints, ...: skipped, as HTTP/1.1 says
        low = head.lower()
        self.head = low  # kept for `reusable()`, parsed after the exchange, not on the read path
        if b"transfer-encoding: chunked" in low:
            self._mode = 1
            return False
        k = low.find(b"content-length:")
        if k >= 0:
            value = low[k + 15:].split(b"\r\n", 1)[0].strip()
            if not value.isdigit():
                raise Refused("bad_response", f"Content-Length is not a number: {value[:20]!r}")
            self._mode = 2
            self._left = int(value)
            if self._left > self.limits.max_response_bytes:
                raise Refused("response_too_large", f"Content-Length {self._left:,} is over "
                              f"{self.limits.max_response_bytes:,} bytes (target.limits.max_response_mb)")
        else:
            self._mode = 3
            self.keep_alive = False  # the body ends when the server closes
        if status in (b"204", b"304") or (self._mode == 2 and self._left == 0):
            self._finish()
        return False

    def reusable(self) -> bool:
        """After the exchange: whether the server lets this connection carry another request (and
        for how long idle, kept in `idle_limit_ns`)."""
        if self.closed or not self.keep_alive:
            return False
        low = self.head
        k = low.find(b"\r\nconnection:")
        if k >= 0 and b"close" in low[k + 13:].split(b"\r\n", 1)[0]:
            return False
        if low.startswith(b"http/1.0") and (k < 0 or b"keep-alive" not in low[k + 13:].split(b"\r\n", 1)[0]):
            return False
        k = low.find(b"\r\nkeep-alive:")
        if k >= 0:
            for part in low[k + 13:].split(b"\r\n", 1)[0].split(b","):
                name, _, value = part.strip().partition(b"=")
                if name == b"timeout" and value.strip().isdigit():
                    self.idle_limit_ns = int(value.strip()) * 1_000_000_000
        return True

    def _confirm_end(self) -> None:
        """Walk the chunk framing of the reads not walked yet (only on a candidate ending, and
        each read at most once, so even a stream of CRLF-terminated events stays linear)."""
        if self._walker is None:
            first, offset = self._body_at
            self._walker = ChunkWalker(collect=False)
            self._walker.feed(self.reads[first][1][offset:])
            self._walked = first + 1
        for _, data in self.reads[self._walked:]:
            self._walker.feed(data)
        self._walked = len(self.reads)
        if self._walker.done:
            self._finish()

    def _finish(self) -> None:
        if self.done is not None and not self.done.done():
            self.done.set_result(None)

    def _lost(self, exc: BaseException | None) -> None:
        self.closed = True
        if self.done is not None and not self.done.done():
            if self._mode == 3 and exc is None:
                self.done.set_result(None)
            else:
                self.done.set_exception(ConnectionResetError(
                    f"connection closed before the response ended{f': {exc}' if exc else ''}"))


class SocketConn(_Framing):
    """Plain TCP, read with `recvmsg` from a reader callback so each read carries the kernel's
    receive timestamp (`SO_TIMESTAMPNS`, CLOCK_REALTIME), converted to the `perf_counter_ns`
    clock with an offset sampled at that moment. The stamp is when the data reached the socket,
    not when the client got round to it, so a busy loop does not move it (measured against the
    simulator at 64 streams: p50 4 us after the send instead of 130 us for user-space stamps).
    Except: TCP gives one stamp per read, that of the last packet read. Packets that queued while
    the loop was busy are read together and the earlier ones stamped late, by at most how long the
    loop was behind (tests/load/test_transport.py shows it; `loadgate.load.turns` bounds it).
    Unless the read's bytes came in one TCP segment, which arrives whole at one moment: after each
    read, `TCP_INFO` gives the connection's count of data segments received and of bytes received;
    when every byte received has been read (nothing queued behind this read) and the count moved by
    exactly one since the last such read, the read is one segment and every event in it arrived at
    its stamp (`one_segment`). A server that writes several events at once (llama-server's verify
    steps) thus keeps exact stamps at any concurrency, as long as the client reads each write
    before the next one arrives. ~1.9 µs a read, asked only of reads with two events or the end
    (for the others it changes no bound; they are counted, each having taken a segment at least);
    where the kernel has no TCP_INFO, no read is counted as one segment.
    Where the kernel gives no timestamp, the user-space time of the read is used."""

    stamp_source = "kernel"

    def __init__(self, sock: socket.socket, loop: asyncio.AbstractEventLoop, limits: Limits | None = None,
                 budget: MemoryBudget | None = None) -> None:
        super().__init__(limits, budget)
        self.sock, self.loop = sock, loop
        self._reading = False
        self.read_total = 0  # every byte read from the socket (headers, discarded bytes, all exchanges)
        self.segs_seen = 0  # tcpi_data_segs_in when a read last drained everything received
        self.segs_skipped: int | None = 0  # reads since then not counted (None: one left data behind)
        self.tcp_info = True

    @classmethod
    async def open(cls, host: str, port: int, limits: Limits | None = None,
                   budget: MemoryBudget | None = None) -> SocketConn:
        loop = asyncio.get_running_loop()
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        family, stype, proto, _, addr = infos[0]
        sock = socket.socket(family, stype, proto)
        sock.setblocking(False)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            try:
                sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
            except OSError:
                pass
            await loop.sock_connect(sock, addr)
        except BaseException:
            sock.close()
            raise
        return cls(sock, loop, limits, budget)

    async def send(self, data: bytes) -> None:
        if not self._reading:
            self.loop.add_reader(self.sock.fileno(), self._readable)
            self._reading = True
        self.sent_ns = perf_counter_ns()  # before: no answer can arrive earlier
        await self.loop.sock_sendall(self.sock, data)

    def _readable(self) -> None:
        recvmsg, now, turns = self.sock.recvmsg, perf_counter_ns, LOOP_TURNS
        for _ in range(READS_PER_WAKEUP):  # then back to the loop: its timers (timeouts) run
            if self.closed:
                return
            begin = now()  # data not in this read arrived after this (the GIL may be late to return)
            turn = turns.current  # the open turn, else a new one (`enter` also checks: this is the hot path)
            if turn is None or not turns.pending or turns.loop is not self.loop:
                turn = turns.enter(begin, self.loop)
            try:
                data, anc, _, _ = recvmsg(READ_SIZE, 64)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:
                self._stop_reading()
                self._lost(e)
                return
            user = now()
            if not data:
                self._stop_reading()
                self._lost(None)
                return
            t = user
            for level, kind, blob in anc:
                if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(blob) >= 16:
                    sec, nsec = _TIMESPEC.unpack_from(blob)
                    t = sec * 1_000_000_000 + nsec - WALL_TO_MONO.offset(user)
                    break
            else:  # no kernel stamp came with this read (an OS or sandbox without them): user time
                self.stamp_source = "user"
            if user - t > self.user_lag_max_ns:
                self.user_lag_max_ns = user - t
            if t < turn.first_stamp:
                turn.first_stamp = t
            self.read_total += len(data)
            one = False
            if self.tcp_info:
                if len(data) < READ_SIZE and data.count(b"data:") < 2 and b"0\r\n\r\n" not in data:
                    # one event at most and not the end: whether it came in one segment changes no
                    # bound (`target.early_bounds`), so the kernel is not asked; counted instead
                    if self.segs_skipped is not None:
                        self.segs_skipped += 1
                else:
                    try:
                        info = self.sock.getsockopt(socket.IPPROTO_TCP, TCP_INFO, _TCPI_LEN)
                    except OSError:
                        info = b""
                    if len(info) < _TCPI_LEN:
                        self.tcp_info = False
                    else:
                        received, segs = _TCPI.unpack_from(info, _TCPI_AT)
                        if received == self.read_total:  # nothing queued behind this read
                            # every read since the last count took at least one segment of its own, so
                            # this one is one segment when the count moved by one more than them
                            skipped = self.segs_skipped
                            one = skipped is not None and segs - self.segs_seen == skipped + 1
                            self.segs_seen, self.segs_skipped = segs, 0
                        else:
                            self.segs_skipped = None  # data left behind: unknown until the next count
            self._on_data(t, data, (begin, turn, one))
            if len(data) < READ_SIZE:  # drained; the reader is level-triggered, more data calls again
                return

    def _stop_reading(self) -> None:
        if self._reading:
            self.loop.remove_reader(self.sock.fileno())
            self._reading = False

    def abort(self) -> None:
        """Refused mid-response: close at once (the rest of the response is not read)."""
        self.close()

    def idle(self) -> None:
        """Between exchanges: stop watching the socket (a close is noticed at the next use)."""
        self._stop_reading()

    def alive(self) -> bool:
        """Before reuse: no close (EOF), error or stray bytes waiting on the socket."""
        if self.closed:
            return False
        try:
            self.sock.recv(1, socket.MSG_PEEK)
        except (BlockingIOError, InterruptedError):
            return True
        except OSError:
            return False
        return False  # EOF, or bytes nobody asked for: either way not a clean connection

    def close(self) -> None:
        self._stop_reading()
        self.closed = True
        self.end()
        self.sock.close()


class ProtocolConn(_Framing, asyncio.Protocol):
    """TLS (or any transport asyncio provides): stamped in `data_received`, in user space."""

    stamp_source = "user"

    def __init__(self, limits: Limits | None = None, budget: MemoryBudget | None = None) -> None:
        _Framing.__init__(self, limits, budget)
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    async def send(self, data: bytes) -> None:
        assert self.transport is not None
        self.sent_ns = perf_counter_ns()
        self.transport.write(data)

    def data_received(self, data: bytes) -> None:
        t = perf_counter_ns()
        self._on_data(t, data, (t, None, False))

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost(exc)

    def idle(self) -> None:
        pass

    def alive(self) -> bool:
        return not self.closed and self.transport is not None and not self.transport.is_closing()

    def abort(self) -> None:
        self.closed = True
        self.end()
        if self.transport is not None:
            self.transport.abort()

    def close(self) -> None:
        self.closed = True
        self.end()
        if self.transport is not None:
            self.transport.close()


Conn = SocketConn | ProtocolConn


def parse_response(reads: list[tuple[int, bytes]]) -> Response:
    """Parse stamped raw reads (after the exchange) into status, headers and stamped payload;
    interim 1xx responses are skipped. Refused ("bad_response") for framing that is not HTTP."""
    r = Response()
    pieces = list(reads)
    while True:
        head = b""
        k, idx = -1, 0
        while idx < len(pieces):
            t, data = pieces[idx]
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
        rest = [(pieces[idx][0], head[k + 4:])] + pieces[idx + 1:]
        if r.status is not None and 100 <= r.status < 200 and r.status != 101:
            pieces = [p for p in rest if p[1]]  # an interim response: the real one follows
            continue
        break
    for line in lines[1:]:
        name, _, value = line.partition(":")
        r.headers[name.strip().lower()] = value.strip()
    if "chunked" in r.headers.get("transfer-encoding", "").lower():
        w = ChunkWalker(collect=True)
        for t, data in rest:
            for piece in w.feed(data):
                r.body.append((t, piece))
        r.complete = w.done
    else:
        cl = r.headers.get("content-length")
        if cl is not None and not (cl.isascii() and cl.isdigit()):
            raise Refused("bad_response", f"Content-Length is not a number: {cl[:20]!r}")
        want = int(cl) if cl is not None else None
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
    """Keep-alive connections to one origin, created on demand, never limited in number; every
    response checked against `limits`, and all in flight together against the memory budget."""

    def __init__(self, url: str, limits: Limits | None = None, ssl_context: ssl.SSLContext | None = None) -> None:
        u = urlsplit(url)
        self.host = u.hostname or "127.0.0.1"
        self.port = u.port or (443 if u.scheme == "https" else 80)
        self.ssl: ssl.SSLContext | None = None
        if u.scheme == "https":
            self.ssl = ssl_context or ssl.create_default_context()
        self.limits = limits or Limits()
        self.budget = MemoryBudget(self.limits.memory_budget_bytes)
        self.path = (u.path or "/") + (f"?{u.query}" if u.query else "")
        self.idle: list[Conn] = []
        self.opened = 0  # connections made so far (a measured phase should make none after its warmup)
        # Reuses that worked, and reused connections found closed only when the request was sent
        # (the server closed after its response, and its FIN had not arrived when the connection
        # was checked). A server whose first reuses all fail that way does not keep connections
        # alive (llama-server after a stream): stop reusing, so no later request pays a failed send.
        self.reuses_ok = 0
        self.reuses_stale = 0

    async def acquire(self, fresh: bool = False) -> tuple[Conn, bool]:
        """A connection and whether it is a reused one. `fresh`: open a new one regardless."""
        now = perf_counter_ns()
        while self.idle and not fresh:
            c = self.idle.pop()
            limit = c.idle_limit_ns
            if (limit is None or now - c.idle_since_ns < limit - IDLE_MARGIN_NS) and c.alive():
                return c, True
            c.close()
        return await self._open(), False

    async def _open(self) -> Conn:
        self.opened += 1
        if self.ssl is None:
            return await SocketConn.open(self.host, self.port, self.limits, self.budget)
        loop = asyncio.get_running_loop()
        _, conn = await loop.create_connection(lambda: ProtocolConn(self.limits, self.budget), self.host, self.port,
                                               ssl=self.ssl)
        return conn

    @property
    def reusing(self) -> bool:
        return self.reuses_ok > 0 or self.reuses_stale < STALE_REUSES_BEFORE_GIVING_UP

    def release(self, c: Conn, reusable: bool) -> None:
        c.end()
        if reusable and self.reusing and c.reusable():
            c.idle()
            c.idle_since_ns = perf_counter_ns()
            self.idle.append(c)
        else:
            c.close()

    def close(self) -> None:
        for c in self.idle:
            c.close()
        self.idle.clear()

    def request_bytes(self, body: bytes, headers: dict[str, str]) -> bytes:
        extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        return (f"POST {self.path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n{extra}\r\n").encode() + body
