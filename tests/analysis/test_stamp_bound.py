"""The per-chunk stamp bound (`early_bounds`) and the loop-turn floor that narrows it, on
hand-built exchanges whose true timings are known, and on real reads."""

from __future__ import annotations

from loadgate.load.target import READ_SIZE, Raw, early_bounds, finish_socket

MS = 1_000_000


def exchange(last_stamp: int, end_stamp: int, prev_read: int, one_segment: bool = False) -> tuple[Raw, list[int]]:
    """A stream whose chunks came 20 ms apart, read in busy turns; its last chunk read at
    `last_stamp`, the end at `end_stamp` (the same read when equal; `one_segment`: that read's bytes
    came in one TCP segment)."""
    stamps = [last_stamp - 40 * MS, last_stamp - 20 * MS, last_stamp]
    raw = Raw(start_ns=0, end_ns=end_stamp)
    for t in stamps[:-1]:
        raw.prev_read_of[t] = t - 20 * MS
    raw.prev_read_of[last_stamp] = prev_read
    raw.one_segment_of[last_stamp] = one_segment
    if end_stamp != last_stamp:
        raw.prev_read_of[end_stamp] = last_stamp
    return raw, stamps


def test_the_last_chunk_read_with_the_end_is_bounded_since_the_floor_unless_it_was_one_segment():
    """The stamp of a read of several segments is its last one's arrival: the stream's end. The last
    tokens may have come any time after the floor (the simulator writes its end one loop turn later:
    up to 2 ms at 64 streams), however promptly the loop read them."""
    t = 100 * MS
    raw, stamps = exchange(t, t, prev_read=t - 20 * MS)
    assert early_bounds(raw, stamps) == ([0, 0, 20 * MS], [2])  # busy: since the read before, listed
    raw.quiet_of[t] = True
    raw.prev_read_of[t] = t - 60_000  # a quiet turn's floor: its wake less the measured latency
    assert early_bounds(raw, stamps) == ([0, 0, 60_000], [])
    raw, stamps = exchange(t, t, prev_read=t - 20 * MS, one_segment=True)
    assert early_bounds(raw, stamps) == ([0, 0, 0], [])  # tokens and end in one segment: exact
    raw, stamps = exchange(t, t + 5 * MS, prev_read=t - 20 * MS)
    assert early_bounds(raw, stamps) == ([0, 0, 0], [])  # the end read later: the read ended at the tokens


def test_two_content_chunks_in_one_read_bound_the_first_whatever_the_habit():
    t = 100 * MS
    raw = Raw(start_ns=0, end_ns=t + 20 * MS)
    raw.prev_read_of[t] = t - 15 * MS
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
            assert bounds[4:] == [8 * MS - 30_000] * 4 and busy == [4, 5, 6, 7]  # the last with the end, too


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
            assert bounds[:3] == [8 * MS] * 3 and busy == [0, 1, 2, 4, 5, 6, 7]


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
    # the headers (no event: the kernel is not asked, and they count as a segment taken), the one
    # write, the two writes read together
    assert ones[:3] == [False, True, False], ones


def _sse(*events: bytes) -> bytes:
    return b"".join(b"%x\r\n%b\r\n" % (len(e), e) for e in (b"data: " + x + b"\n\n" for x in events))


def test_the_last_tokens_of_a_read_that_goes_on_with_an_event_without_tokens_are_bounded():
    """A read whose tokens are followed by a usage event (a later write: the simulator's handler
    wrote it one loop turn after the tokens) is stamped with that event's arrival: its last tokens
    carry the bound since the floor, not zero. The same tokens read alone are exact."""
    from loadgate.engine.adapters import adapter_for
    from loadgate.load.target import decode

    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    tok = b'{"choices": [{"index": 0, "text": "a", "finish_reason": null}]}'
    usage = b'{"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}}'
    t1, t2, t3 = 10 * MS, 18 * MS, 20 * MS
    for trailing in (True, False):
        second = _sse(tok, usage) if trailing else _sse(tok)
        last = _sse(b"[DONE]") + b"0\r\n\r\n" if trailing else _sse(usage, b"[DONE]") + b"0\r\n\r\n"
        raw = Raw(start_ns=0, sent_ns=1 * MS, socket_reads=[(2 * MS, head), (t1, _sse(tok)), (t2, second), (t3, last)],
                  read_begin=[(2 * MS, 2 * MS, 0, False, False), (t1, t1, 2 * MS, False, False),
                              (t2, t2, t1, False, False), (t3, t3, t2, False, False)])
        d = decode(adapter_for("openai-completions"), True, raw)
        assert [c.t_ns for c in d.chunks] == [t1, t2]
        bounds, _ = early_bounds(raw, [c.t_ns for c in d.chunks])
        assert bounds == ([0, 8 * MS] if trailing else [0, 0])


def test_where_the_host_took_a_share_of_the_cpu_a_quiet_turn_narrows_only_reads_of_one_segment():
    """Reads in turns that woke from an idle poll: the wake's measured floor holds while the host
    did not hold the machine (`trust_wakes`); otherwise a read of several segments keeps the floor
    of its poll's start (its first segment may have waited for a wake the host held up), and a read
    of one segment stays exact."""
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    ev = b"".join(b"9\r\ndata: %d\n\n\r\n" % k for k in range(2))
    t1, t2 = 10 * MS, 18 * MS
    for trust in (True, False):
        raw = Raw(start_ns=0, sent_ns=1 * MS, socket_reads=[(2 * MS, head), (t1, ev), (t2, ev)],
                  read_begin=[(2 * MS, 2 * MS, 0, False, False, 0),
                              (t1, t1, t1 - 40_000, True, True, 3 * MS),  # one segment
                              (t2, t2, t2 - 40_000, True, False, 11 * MS)])  # two segments
        finish_socket(raw, trust_wakes=trust)
        bounds, busy = early_bounds(raw, [t1, t1, t2, t2])
        if trust:
            assert bounds == [0, 0, 40_000, 40_000] and busy == []  # the last one came with the end
        else:
            assert bounds == [0, 0, 7 * MS, 7 * MS] and busy == [2, 3]  # since the poll's start, listed as held up


def test_a_read_that_goes_on_with_a_final_event_or_into_the_next_event_bounds_its_last_tokens():
    """Reads decided by the event each chunk came from: a final event with an empty text and the
    usage (llama-server's /v1 end, which alone would decode as a chunk of the whole count), or a
    read that ends inside the next event (CRLF lines here): the tokens before keep the bound."""
    from loadgate.engine.adapters import adapter_for
    from loadgate.load.target import decode

    def crlf(*events: bytes) -> bytes:
        return b"".join(b"data: " + e + b"\r\n\r\n" for e in events)

    tok = b'{"choices": [{"index": 0, "text": " a", "finish_reason": null}]}'
    final = b'{"choices": [{"index": 0, "text": "", "finish_reason": "length"}], "usage": {"completion_tokens": 2}}'
    t1, t2, t3 = 10 * MS, 30 * MS, 40 * MS
    for second, third in ((crlf(tok, final), crlf(b"[DONE]")),  # the final event after the tokens
                          (crlf(tok) + crlf(tok)[:20], crlf(tok)[20:] + crlf(b"[DONE]"))):  # into the next event
        raw = Raw(start_ns=0, end_ns=t3, status=200, reads=[(t1, crlf(tok)), (t2, second), (t3, third)])
        raw.prev_read_of = {t1: 0, t2: t1, t3: t2}
        d = decode(adapter_for("openai-completions"), True, raw)
        stamps = [c.t_ns for c in d.chunks]
        bounds, _ = early_bounds(raw, stamps)
        assert stamps[:2] == [t1, t2] and bounds[:2] == [0, 20 * MS], (stamps, bounds)


def test_a_preemption_without_a_sleep_is_no_quiet_turn(monkeypatch):
    """A preemption takes the thread off its CPU too; without a voluntary switch the poll may not
    have slept, and the turn keeps the busy floor (the poll two turns back)."""
    import types

    import uvloop

    from loadgate.load import turns

    loop = uvloop.new_event_loop()
    try:
        lt = turns.LoopTurns()
        counts = {"waited": 0, "nvcsw": 5}
        lt.enter(1_000_000, loop)  # a first turn, to set up the loop
        lt.run_delay = lambda: counts["waited"]
        monkeypatch.setattr(turns, "getrusage", lambda _who: types.SimpleNamespace(ru_nvcsw=counts["nvcsw"]))
        monkeypatch.setattr(turns, "no_other_threads", lambda: True)
        for voluntary, quiet in ((False, False), (True, True)):
            lt._turn_over()  # the marker
            counts["waited"] += 1000  # off the CPU since: preempted (a run-queue wait), or asleep in the poll
            counts["nvcsw"] += voluntary
            turn = lt.enter(lt.ended + 5 * MS, loop)
            assert turn.quiet is quiet
            lt.pending = False
    finally:
        loop.close()


def test_a_quiet_turn_counts_the_run_queue_wait_since_the_last_quiet_wake(monkeypatch):
    """The run-queue file is read once a quiet turn: the wait between the last quiet turn's wake and
    the marker (a preemption while that turn ran) is taken off this turn's estimate too, never left
    out (leaving it out would put the floor after data that may have arrived during the wait)."""
    import types

    import uvloop

    from loadgate.load import turns

    loop = uvloop.new_event_loop()
    try:
        lt = turns.LoopTurns()
        c = {"waited": 0, "nvcsw": 5, "cpu": 0}
        lt.enter(1_000_000, loop)
        lt.run_delay = lambda: c["waited"]
        monkeypatch.setattr(turns, "getrusage", lambda _who: types.SimpleNamespace(ru_nvcsw=c["nvcsw"]))
        monkeypatch.setattr(turns, "no_other_threads", lambda: True)
        monkeypatch.setattr(turns, "thread_time_ns", lambda: c["cpu"])
        lt._turn_over()
        lt.marker_rd = 0
        c["nvcsw"] += 1
        first = lt.enter(lt.ended + 5 * MS, loop)  # quiet: the reference is read here
        assert first.quiet
        c["waited"] += 2 * MS  # preempted while the turn ran, before its marker
        lt.pending = False
        lt._turn_over()
        c["nvcsw"] += 1
        c["cpu"] += 30_000  # the poll's own CPU after the marker
        begin = lt.ended + 5 * MS
        second = lt.enter(begin, loop)
        assert second.quiet
        assert second.estimate == begin - 30_000 - 2 * MS - turns.WAKE_SLACK_NS
    finally:
        loop.close()
