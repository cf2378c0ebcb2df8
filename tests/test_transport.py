"""The hot-path HTTP client: chunked framing however the bytes are split, and a real exchange."""

from __future__ import annotations

import asyncio
import time

from hypothesis import given, settings
from hypothesis import strategies as st

from loadgate.transport import Pool, ProtocolConn, SocketConn, parse_response


def chunked(pieces: list[bytes]) -> bytes:
    return b"".join(b"%x\r\n%b\r\n" % (len(p), p) for p in pieces if p) + b"0\r\n\r\n"


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(min_size=1, max_size=300), max_size=12), st.lists(st.integers(1, 50), max_size=40))
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
            c = await pool.acquire()
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
