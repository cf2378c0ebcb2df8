"""The per-chunk stamp bound (`early_bounds`) and the loop-turn floor that narrows it, on
hand-built exchanges whose true timings are known, and on real reads."""

from __future__ import annotations

from loadgate.load.target import LATE_READ_NS, READ_SIZE, Raw, early_bounds, finish_socket

MS = 1_000_000


def exchange(last_stamp: int, end_stamp: int, wake_late_ns: int, prev_read: int) -> tuple[Raw, list[int]]:
    """A stream whose chunks came 20 ms apart; its last chunk read at `last_stamp` (the read's loop
    turn woke `wake_late_ns` after it), the end at `end_stamp` (the same read when equal)."""
    stamps = [last_stamp - 40 * MS, last_stamp - 20 * MS, last_stamp]
    raw = Raw(start_ns=0, end_ns=end_stamp)
    for t in stamps[:-1]:
        raw.prev_read_of[t], raw.wake_of[t] = t - 20 * MS, t
    raw.prev_read_of[last_stamp], raw.wake_of[last_stamp] = prev_read, last_stamp + wake_late_ns
    if end_stamp != last_stamp:
        raw.prev_read_of[end_stamp], raw.wake_of[end_stamp] = last_stamp, end_stamp
    return raw, stamps


def test_a_prompt_read_of_the_last_chunk_with_the_end_is_exact_and_a_late_one_is_bounded():
    t = 100 * MS
    raw, stamps = exchange(t, t, wake_late_ns=LATE_READ_NS // 2, prev_read=t - 20 * MS)
    assert early_bounds(raw, stamps) == ([0, 0, 0], [])
    raw, stamps = exchange(t, t, wake_late_ns=3 * MS, prev_read=t - 20 * MS)
    assert early_bounds(raw, stamps) == ([0, 0, 20 * MS], [2])  # the loop was behind: since the read before


def test_two_content_chunks_in_one_read_bound_the_first_whatever_the_habit():
    t = 100 * MS
    raw = Raw(start_ns=0, end_ns=t + 20 * MS)
    raw.prev_read_of[t], raw.wake_of[t] = t - 15 * MS, t
    assert early_bounds(raw, [t, t, t + 20 * MS]) == ([15 * MS, 0, 0], [0])


def test_chunks_read_together_in_a_turn_that_woke_from_an_idle_poll_get_its_wake_latency():
    """Four events of one write (llama-server's verify step) read in a quiet turn: the floor is the
    turn's wake less its measured latency, so the first three get tens of microseconds, not the 8 ms
    since the stream's previous read, and none is listed as bounded while the loop was busy. The same
    read in a busy turn keeps the wide bound and is listed."""
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    ev = b"".join(b"9\r\ndata: %d\n\n\r\n" % k for k in range(4))
    t1, t2 = 10 * MS, 18 * MS
    for quiet, floor in ((True, t2 - 40_000), (False, t1)):
        raw = Raw(start_ns=0, sent_ns=1 * MS, socket_reads=[(2 * MS, head), (t1, ev), (t2, ev + b"0\r\n\r\n")],
                  read_begin=[(2 * MS, 2 * MS, 0, False, False), (t1 + 30_000, t1 + 30_000, t1 - 40_000, True, False),
                              (t2 + 30_000, t2 + 30_000, floor, quiet, False)])
        finish_socket(raw)
        stamps = [t1] * 4 + [t2] * 4
        bounds, busy = early_bounds(raw, stamps)
        if quiet:
            assert bounds == [40_000] * 3 + [0] + [40_000] * 4 and busy == []
        else:
            assert bounds[4:] == [8 * MS - 30_000] * 3 + [0] and busy == [4, 5, 6]  # the end read promptly: exact


def test_the_floor_of_two_turns_back_narrows_a_bound_unless_a_full_read_left_data_behind():
    """Reads (stamp, bytes) with (began, turn woke, floor): the floor narrows the bound to the
    loop's poll two turns back; after a full read the data may be older than any turn."""
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    ev = b"5\r\ndata:\r\n"
    raw = Raw(start_ns=0, sent_ns=1 * MS, socket_reads=[(2 * MS, head), (50 * MS, ev)],
              read_begin=[(2 * MS, 2 * MS, 0, False, False), (50 * MS, 50 * MS, 46 * MS, False, False)])
    finish_socket(raw)
    assert raw.prev_read_of[50 * MS] == 46 * MS  # not the read 48 ms before: the loop polled since
    big = b"x" * READ_SIZE
    raw = Raw(start_ns=0, sent_ns=1 * MS, socket_reads=[(2 * MS, big), (50 * MS, ev)],
              read_begin=[(2 * MS, 2 * MS, 0, False, False), (50 * MS, 50 * MS, 46 * MS, False, False)])
    finish_socket(raw)
    assert raw.prev_read_of[50 * MS] == 1 * MS  # the full read left bytes from before it began


def test_a_read_whose_bytes_came_in_one_segment_is_exact_whatever_its_turn():
    """Four events of one write, read in a busy turn whose floor is 8 ms back: when the read is one
    TCP segment (the kernel's count of data segments moved by one, nothing queued behind it), all
    four arrived at the stamp, so none carries a bound; the same read of two segments keeps it."""
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    ev = b"".join(b"9\r\ndata: %d\n\n\r\n" % k for k in range(4))
    t1, t2 = 10 * MS, 18 * MS
    for one in (True, False):
        raw = Raw(start_ns=0, sent_ns=1 * MS, socket_reads=[(2 * MS, head), (t1, ev), (t2, ev + b"0\r\n\r\n")],
                  read_begin=[(2 * MS, 2 * MS, 0, False, True), (t1 + 30_000, t1 + 30_000, 2 * MS, False, one),
                              (t2 + 30_000, t2 + 30_000, t1, False, one)])
        finish_socket(raw)
        bounds, busy = early_bounds(raw, [t1] * 4 + [t2] * 4)
        if one:
            assert bounds == [0] * 8 and busy == []
        else:
            assert bounds[:3] == [8 * MS] * 3 and busy == [0, 1, 2, 4, 5, 6]


def test_the_kernel_counts_one_segment_for_one_write_and_two_for_two_writes_read_together():
    """On a real loopback connection: a write read alone is one segment; two writes that queued
    before the read are two, so their events keep a bound."""
    import asyncio
    import socket
    import threading
    import time

    import uvloop

    from tests.loopback import sent_to

    go = [threading.Event() for _ in range(3)]

    def serve(lsock: socket.socket) -> None:
        c, _ = lsock.accept()
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        c.recv(65536)
        c.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        go[0].wait(5)
        c.sendall(b"9\r\ndata: 1\n\n\r\n9\r\ndata: 2\n\n\r\n")  # one write: one segment
        go[1].wait(5)
        c.sendall(b"9\r\ndata: 3\n\n\r\n")  # two writes while the client is not reading
        time.sleep(0.01)
        c.sendall(b"9\r\ndata: 4\n\n\r\n")
        go[2].wait(5)
        c.sendall(b"0\r\n\r\n")
        c.close()

    async def exchange() -> list[bool]:
        async with sent_to(serve) as c:
            for k in range(3):
                await asyncio.sleep(0.05)
                if k == 1:  # the loop is blocked while both writes arrive
                    go[1].set()
                    time.sleep(0.05)
                    continue
                go[k].set()
            assert c.done is not None
            await asyncio.wait_for(c.done, 5)
            return [one for _, _, one in c.read_begin]

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        ones = runner.run(exchange())
    assert ones[:3] == [True, True, False], ones  # headers, the one write, the two writes read together
