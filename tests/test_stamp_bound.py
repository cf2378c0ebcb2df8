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
    assert early_bounds(raw, stamps) == [0, 0, 0]
    raw, stamps = exchange(t, t, wake_late_ns=3 * MS, prev_read=t - 20 * MS)
    assert early_bounds(raw, stamps) == [0, 0, 20 * MS]  # the loop was behind: since the read before


def test_two_content_chunks_in_one_read_bound_the_first_whatever_the_habit():
    t = 100 * MS
    raw = Raw(start_ns=0, end_ns=t + 20 * MS)
    raw.prev_read_of[t], raw.wake_of[t] = t - 15 * MS, t
    assert early_bounds(raw, [t, t, t + 20 * MS]) == [15 * MS, 0, 0]


def test_the_floor_of_two_turns_back_narrows_a_bound_unless_a_full_read_left_data_behind():
    """Reads (stamp, bytes) with (began, turn woke, floor): the floor narrows the bound to the
    loop's poll two turns back; after a full read the data may be older than any turn."""
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    ev = b"5\r\ndata:\r\n"
    raw = Raw(start_ns=0, sent_ns=1 * MS, socket_reads=[(2 * MS, head), (50 * MS, ev)],
              read_begin=[(2 * MS, 2 * MS, 0), (50 * MS, 50 * MS, 46 * MS)])
    finish_socket(raw)
    assert raw.prev_read_of[50 * MS] == 46 * MS  # not the read 48 ms before: the loop polled since
    big = b"x" * READ_SIZE
    raw = Raw(start_ns=0, sent_ns=1 * MS, socket_reads=[(2 * MS, big), (50 * MS, ev)],
              read_begin=[(2 * MS, 2 * MS, 0), (50 * MS, 50 * MS, 46 * MS)])
    finish_socket(raw)
    assert raw.prev_read_of[50 * MS] == 1 * MS  # the full read left bytes from before it began
