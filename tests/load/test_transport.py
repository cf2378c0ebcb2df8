"""The hot-path HTTP client: chunked framing however the bytes are split, and a real exchange."""

from __future__ import annotations

import asyncio
import contextlib
import time

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from loadgate.load.transport import Pool, ProtocolConn, Refused, SocketConn, parse_response


def chunked(pieces: list[bytes]) -> bytes:
    return b"".join(b"%x\r\n%b\r\n" % (len(p), p) for p in pieces if p) + b"0\r\n\r\n"


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(min_size=1, max_size=300), max_size=12), st.lists(st.integers(1, 50), max_size=40))
@example([], [1, 26, 50, 1])  # the header block's end split over a 1-byte read (found by this test)
def test_chunked_payload_survives_any_split_and_the_end_is_found_exactly_once(pieces, cuts):
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Type: text/event-stream\r\n\r\n"
    wire = head + chunked(pieces)
    reads, pos, t = [], 0, 0
    for c in cuts:
        if pos >= len(wire):
            break
        reads.append((t, wire[pos:pos + c]))
        pos, t = pos + c, t + 1
    if pos < len(wire):
        reads.append((t, wire[pos:]))
    r = parse_response(reads)
    assert r.status == 200 and r.complete
    assert b"".join(b for _, b in r.body) == b"".join(pieces)
    # the hot-path protocol (walks framing, copies nothing) sees the end at the last read only
    async def feed() -> list[bool]:
        conn = ProtocolConn()
        done = conn.begin()
        states = []
        for _, data in reads:
            conn.data_received(data)
            states.append(done.done())
        return states

    states = asyncio.run(feed())
    assert states[-1] and not any(states[:-1])


@pytest.mark.parametrize("size", [b"0x5", b"5_0", b"+5", b"-5", b"5 0", b"5g", b"g5", b"", b"1" * 17])
def test_a_chunk_size_line_that_is_not_plain_hex_is_a_bad_response(size):
    """What Python's int(x, 16) would take beyond hex digits (a sign, 0x, an underscore) is refused."""
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    with pytest.raises(Refused) as e:
        parse_response([(0, head + size + b"\r\nhello\r\n0\r\n\r\n")])
    assert e.value.kind == "bad_response"


@pytest.mark.parametrize("size", [b"5", b"05", b"5;ext=1", b" 5 "])
def test_a_chunk_size_in_hex_with_extensions_or_blanks_is_read(size):
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    r = parse_response([(0, head + size + b"\r\nhello\r\n0\r\n\r\n")])
    assert r.complete and b"".join(b for _, b in r.body) == b"hello"


def test_payload_pieces_keep_the_stamp_of_the_read_that_carried_them():
    wire = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked([b"data: 1\n\n", b"data: 2\n\n"])
    k = wire.index(b"data: 2")
    r = parse_response([(10, wire[:k]), (20, wire[k:])])
    assert r.headers_ns == 10
    assert [(t, b) for t, b in r.body] == [(10, b"data: 1\n\n"), (20, b"data: 2\n\n")]


def test_content_length_and_an_incomplete_body():
    full = parse_response([(1, b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 5\r\n\r\nbusy!")])
    assert full.status == 503 and full.complete and full.body == [(1, b"busy!")]
    cut = parse_response([(1, b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc")])
    assert not cut.complete


def test_a_real_exchange_over_loopback_reuses_the_connection():
    async def main() -> tuple[list[bytes], int]:
        seen = []

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            for _ in range(2):
                head = await reader.readuntil(b"\r\n\r\n")
                n = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                seen.append(await reader.readexactly(n))
                writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked([b"data: x\n\n"]))
                await writer.drain()
            writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        pool = Pool(f"http://127.0.0.1:{port}/v1/completions")
        conns = []
        for body in (b'{"a":1}', b'{"b":2}'):
            c, _ = await pool.acquire()
            assert isinstance(c, SocketConn)
            conns.append(id(c))
            done = c.begin()
            sent = time.perf_counter_ns()
            await c.send(pool.request_bytes(body, {"x-request-id": "r"}))
            await asyncio.wait_for(done, 5)
            got = time.perf_counter_ns()
            r = parse_response(c.reads)
            assert r.body[0][1] == b"data: x\n\n"
            # kernel receive stamps, converted to perf_counter_ns, fall inside the exchange
            assert all(sent <= t <= got for t, _ in c.reads)
            pool.release(c, reusable=True)
        pool.close()
        server.close()
        return seen, len(set(conns))

    seen, distinct = asyncio.run(main())
    assert seen == [b'{"a":1}', b'{"b":2}'] and distinct == 1


def _cpp_httplib_like(idle_close_s: float, max_per_conn: int, keep_alive_header: str | None):
    """A loopback server that keeps connections alive the way llama-server's cpp-httplib does:
    it closes one idle for `idle_close_s` (silently), and answers a connection's `max_per_conn`-th
    request with `Connection: close` and closes it."""
    stats = {"connections": 0, "requests": 0}

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        stats["connections"] += 1
        try:
            for k in range(1, max_per_conn + 1):
                try:
                    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), idle_close_s)
                except (TimeoutError, asyncio.IncompleteReadError):
                    return
                n = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                await reader.readexactly(n)
                stats["requests"] += 1
                conn = b"Connection: close\r\n" if k == max_per_conn else (
                    b"Keep-Alive: %b\r\n" % keep_alive_header.encode() if keep_alive_header else b"")
                writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n" + conn + b"\r\n"
                             + chunked([b"data: x\n\n"]))
                await writer.drain()
        finally:
            writer.close()

    return handle, stats


def _against(handle, rounds: list[tuple[int, float]], pool_out: list | None = None) -> tuple[list[str | None], int]:
    """Serve `handle` on loopback (in a thread) and send `rounds` of (requests in flight, seconds
    to pause afterwards) through one LiveTarget. Returns each request's error kind (None when it
    succeeded) and the connections the pool opened; the pool itself goes to `pool_out`."""
    import threading

    from loadgate.load.target import LiveTarget, TargetSpec, fetch, finish_socket
    from loadgate.net.http import make_session

    server_loop = asyncio.new_event_loop()
    server = server_loop.run_until_complete(asyncio.start_server(handle, "127.0.0.1", 0))
    port = server.sockets[0].getsockname()[1]
    th = threading.Thread(target=server_loop.run_forever, daemon=True)
    th.start()

    async def main() -> tuple[list[str | None], int]:
        session = make_session()
        t = LiveTarget(TargetSpec(f"http://127.0.0.1:{port}", "openai-completions", "m", 5.0), session)
        errors: list[str | None] = []
        for n, pause in rounds:
            raws = await asyncio.gather(*(fetch(t, b"{}", f"r{i}") for i in range(n)))
            for raw in raws:
                finish_socket(raw)
                errors.append(raw.error.kind if raw.error else None)
                assert raw.error is not None or raw.reads[0][1] == b"data: x\n\n"
            await asyncio.sleep(pause)
        assert t.pool is not None
        opened = t.pool.opened
        t.pool.close()
        if pool_out is not None:
            pool_out.append(t.pool)
        await session.close()
        return errors, opened

    async def shutdown() -> None:
        server.close()
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    try:
        return asyncio.run(main())
    finally:
        asyncio.run_coroutine_threadsafe(shutdown(), server_loop).result(5)
        server_loop.call_soon_threadsafe(server_loop.stop)
        th.join(5)
        server_loop.close()


def test_connections_the_server_closed_while_idle_are_not_reused():
    """Four connections outlive the server's idle limit; then one request, then four. Before the
    fix the one request took a stale connection, retried on a second stale one, and failed."""
    handle, stats = _cpp_httplib_like(0.2, 100, None)
    errors, opened = _against(handle, [(4, 0.5), (1, 0.5), (4, 0.0)])
    assert errors == [None] * 9
    assert opened == 9 and stats["requests"] == 9  # new connections each round; nothing sent twice


def test_connection_close_and_the_advertised_idle_timeout_are_honoured():
    """`Connection: close` on every 2nd response: that connection is not reused. A round that
    follows within the advertised `Keep-Alive: timeout=` reuses; one after it opens new ones."""
    handle, stats = _cpp_httplib_like(30.0, 2, "timeout=2, max=2")
    # round 1 opens 3; round 2 reuses them (their 2nd request, answered with close); round 3
    # opens 3 new ones; after 1.2 s (past 2 s less the 1 s margin) round 4 opens 3 more
    errors, opened = _against(handle, [(3, 0.0), (3, 0.0), (3, 1.2), (3, 0.0)])
    assert errors == [None] * 12
    assert opened == 9 and stats["connections"] == 9 and stats["requests"] == 12


def test_a_server_that_closes_after_every_response_is_not_kept_alive_for_long():
    """Like llama-server after a stream: the server answers one request per connection and then
    closes without saying so. Here it closes only once the next request has arrived, so every
    reuse is certain to find the connection closed on send (the race at its worst). After 3 such
    reuses the pool stops reusing, so later requests do not each pay a failed send first."""
    async def one_per_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        await reader.readexactly(int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0]))
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked([b"data: x\n\n"]))
        await writer.drain()
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            await reader.readuntil(b"\r\n\r\n")  # a reused connection's request: closed unanswered
        writer.close()

    pools: list = []
    errors, opened = _against(one_per_connection, [(1, 0.0)] * 20, pools)
    assert errors == [None] * 20 and opened == 20  # every request answered, each on its own connection
    assert pools[0].reuses_ok == 0 and pools[0].reuses_stale == 3 and not pools[0].reusing


@pytest.mark.timing
def test_a_read_is_stamped_when_its_last_packet_arrived():
    """The kernel's limit, pinned: three events arrive 20 ms apart while the client's loop is
    blocked; one read takes them all, and all three carry the third one's arrival time."""
    import socket
    import threading

    third_sent = threading.Event()

    def serve(lsock: socket.socket, sends: list[int]) -> None:
        c, _ = lsock.accept()
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        c.recv(65536)
        c.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        for k in range(3):
            time.sleep(0.02)
            sends.append(time.perf_counter_ns())
            c.sendall(chunked([b"data: %d\n\n" % k])[:-5])  # one chunk, no terminator yet
        third_sent.set()
        time.sleep(0.3)  # the terminator comes well after the client's loop is free again
        c.sendall(b"0\r\n\r\n")
        time.sleep(0.1)
        c.close()

    async def exchange() -> tuple[list[int], list[int]]:
        lsock = socket.create_server(("127.0.0.1", 0))
        sends: list[int] = []
        th = threading.Thread(target=serve, args=(lsock, sends), daemon=True)
        th.start()
        pool = Pool(f"http://127.0.0.1:{lsock.getsockname()[1]}/v1/completions")
        c, _ = await pool.acquire()
        done = c.begin()
        await c.send(pool.request_bytes(b"{}", {}))
        # the loop is busy (blocked, not awaiting) until all 3 events are in the socket
        assert third_sent.wait(5)
        time.sleep(0.01)
        await asyncio.wait_for(done, 5)
        stamps = [t for t, piece in parse_response(c.reads).body if piece.startswith(b"data:")]
        c.close()  # acquired, never released: the pool closes only its idle connections
        pool.close()
        th.join(5)
        lsock.close()
        return stamps, sends

    stamps, sends = asyncio.run(exchange())
    assert len(stamps) == 3 and stamps[0] == stamps[1] == stamps[2]  # one read, one stamp
    assert abs(stamps[2] - sends[2]) < 5_000_000  # ... the last packet's arrival
    assert stamps[0] - sends[0] > 30_000_000  # so the first event is stamped ~40 ms late


def test_reads_that_wait_only_for_the_rest_of_one_burst_keep_a_tight_end(monkeypatch):
    """One engine step answers 24 streams at once, each with its last chunk and the stream's end in
    one write. The client works through the 24 sockets in one loop turn, slowly (0.3 ms each), so
    the later reads begin well over 2 ms after their packets arrived. They waited for the
    rest of the burst, not because the loop was behind: their loop turn woke from an idle poll, so
    the last chunk's bound reaches back only to that wake less its measured latency, never to the
    read 50 ms before (a bound of the whole gap since the previous read would call a perfectly timed
    run invalid). A second burst after an idle gap is a new turn."""
    import socket
    import threading

    import uvloop

    from loadgate.load import transport
    from loadgate.load.target import Raw, early_bounds, finish_socket
    from loadgate.load.turns import resolved

    n = 24
    tail = chunked([b'data: {"x": 1}\n\ndata: [DONE]\n\n'])
    ready = threading.Barrier(2)

    def serve(lsock: socket.socket) -> None:
        conns = []
        for _ in range(n):
            c, _ = lsock.accept()
            c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            c.recv(65536)
            c.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
            conns.append(c)
        ready.wait(5)
        time.sleep(0.05)
        for c in conns:  # the burst
            c.sendall(tail)
        time.sleep(0.2)
        for c in conns:
            c.close()

    on_data_as_is = transport._Framing._on_data

    def on_data(self, t_ns, data, begin):  # the client's work per read, made slow
        end = time.perf_counter_ns() + 300_000
        while time.perf_counter_ns() < end:
            pass
        on_data_as_is(self, t_ns, data, begin)

    async def exchange() -> list[Raw]:
        lsock = socket.create_server(("127.0.0.1", 0))
        th = threading.Thread(target=serve, args=(lsock,), daemon=True)
        th.start()
        pool = Pool(f"http://127.0.0.1:{lsock.getsockname()[1]}/v1/completions")
        conns, dones = [], []
        for _ in range(n):
            c, _ = await pool.acquire()
            dones.append(c.begin())
            await c.send(pool.request_bytes(b"{}", {}))
            conns.append(c)
        await asyncio.sleep(0.02)  # the headers are read
        await asyncio.get_running_loop().run_in_executor(None, ready.wait, 5)
        await asyncio.wait_for(asyncio.gather(*dones), 5)
        raws = []
        for c in conns:
            raw = Raw(start_ns=c.sent_ns, socket_reads=list(c.reads), read_begin=resolved(c.read_begin), sent_ns=c.sent_ns)
            finish_socket(raw)
            raws.append(raw)
            c.close()  # acquired, never released: the pool closes only its idle connections
        pool.close()
        th.join(5)
        lsock.close()
        return raws

    monkeypatch.setattr(transport._Framing, "_on_data", on_data)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        raws = runner.run(exchange())
    last = [(raw.end_ns, raw.read_begin[-1]) for raw in raws]
    assert all(raw.status == 200 and raw.error is None for raw in raws)
    # (how many turns the burst takes depends on when the server thread gets the interpreter lock)
    wakes = {wake for _, (_, wake, *_) in last}
    bounds = [early_bounds(raw, [raw.end_ns])[0][0] for raw in raws]
    assert max(bounds) < 25 * 1_000_000, bounds  # bounded from the burst's turns, not the read 50 ms before
    heads = {raw.read_begin[0][1] for raw in raws}
    assert heads.isdisjoint(wakes)  # the headers' reads, 50 ms earlier, were other turns


def test_a_connection_without_kernel_stamps_says_its_stamps_are_user_time(monkeypatch):
    """Where the kernel gives no receive timestamp (an OS or sandbox without them), the reads are
    stamped in user space and the connection says so, so the stamp bound adds the loop's lag."""
    import socket

    from loadgate.load import transport
    from tests.loopback import sent_to

    monkeypatch.setattr(transport, "SO_TIMESTAMPNS", 0x7FFF)  # no such option: setsockopt fails, no stamps

    def serve(lsock: socket.socket) -> None:
        c, _ = lsock.accept()
        c.recv(65536)
        c.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked([b"data: 1\n\n"]))
        time.sleep(0.2)
        c.close()

    async def exchange() -> str:
        async with sent_to(serve) as c:
            assert c.done is not None
            await asyncio.wait_for(c.done, 5)
            return c.stamp_source

    assert asyncio.run(exchange()) == "user"


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.binary(min_size=1, max_size=300),  # and payloads with line ends and hex in them
                          st.lists(st.sampled_from([b"\n", b"\r\n", b"1f", b"0\r\n", b"data: x"]), min_size=1,
                                   max_size=12).map(b"".join)), max_size=12),
       st.lists(st.sampled_from(["%x", "%X", "%04x", "%x;ext=1", "%x ", "-%x", "0x%x", "%x_"]), min_size=12, max_size=12),
       st.booleans(), st.lists(st.integers(1, 400), max_size=12), st.sampled_from([b"", b"0\r\n\r\n", b"5\r\nabcde\r\n"]))
def test_the_one_chunk_read_shortcut_walks_as_the_byte_by_byte_walk_does(pieces, sizes, collect, cuts, after):
    """A read that is one whole chunk from a chunk boundary takes the walker's shortcut; fed one byte at a
    time the same bytes take none: the same payload, the same end, the same refusals (a size line
    that is not hex); so do reads cut anywhere else (inside a chunk, inside a size line, several chunks
    at once), and bytes fed after the end."""
    from loadgate.load.transport import ChunkWalker

    reads = [(sizes[k] % len(p)).encode() + b"\r\n" + p + b"\r\n" for k, p in enumerate(pieces)] + [b"0\r\n\r\n"]
    if after:
        reads.append(after)

    def walk(parts: list[bytes]) -> tuple[bytes, bool] | str:
        w = ChunkWalker(collect)
        out: list[bytes] = []
        try:
            for part in parts:
                out += w.feed(part)
        except Refused as e:
            return e.kind
        return b"".join(out), w.done

    whole = b"".join(reads)
    by_byte = walk([whole[k:k + 1] for k in range(len(whole))])
    assert walk(reads) == by_byte
    split, pos = [], 0
    for c in cuts:
        split.append(whole[pos:pos + c])
        pos += c
    assert walk([*split, whole[pos:]]) == by_byte
    if all(s in ("%x", "%X", "%04x", "%x;ext=1", "%x ") for s in sizes[:len(pieces)]):
        assert walk(reads) == ((b"".join(pieces) if collect else b""), True)
