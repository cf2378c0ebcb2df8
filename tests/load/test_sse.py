"""The SSE framer follows the event-stream rules whatever way the bytes are split into reads."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadgate.load.sse import EventTooLarge, SSEFramer, frame_sse
from tests.fixtures_path import fixture_file


def test_events_split_across_reads_get_the_time_of_the_completing_read():
    events, truncated = frame_sse([(1, b'data: {"a"'), (2, b': 1}\n'), (3, b"\n")])
    assert [(e.t_ns, e.data) for e in events] == [(3, b'{"a": 1}')]
    assert not truncated


def test_several_events_in_one_read():
    events, _ = frame_sse([(5, b"data: 1\n\ndata: 2\n\ndata: [DONE]\n\n")])
    assert [e.data for e in events] == [b"1", b"2", b"[DONE]"]
    assert {e.t_ns for e in events} == {5}


def test_comments_are_ignored_and_crlf_and_cr_end_lines():
    events, _ = frame_sse([(1, b": keep-alive\r\n\r\ndata: x\r\n\r\ndata: y\r\rdata: z\n\n")])
    assert [e.data for e in events] == [b"x", b"y", b"z"]


def test_crlf_split_between_reads_is_one_line_ending():
    # the CR in read 2 already ends the blank line: the event is usable then, not at read 3
    events, _ = frame_sse([(1, b"data: a\r"), (2, b"\n\r"), (3, b"\n"), (4, b"data: b\n\n")])
    assert [(e.t_ns, e.data) for e in events] == [(2, b"a"), (4, b"b")]


def test_multiline_data_event_field_and_no_space_after_colon():
    events, _ = frame_sse([(1, b"event: error\ndata:line1\ndata: line2\nid: 7\nretry: 10\n\n")])
    assert events[0].event == "error" and events[0].data == b"line1\nline2"


def test_unterminated_last_event_is_dropped_and_flagged():
    events, truncated = frame_sse([(1, b"data: 1\n\ndata: 2")])
    assert [e.data for e in events] == [b"1"] and truncated


def test_bom_is_skipped():
    events, _ = frame_sse([(1, b"\xef\xbb\xbfdata: 1\n\n")])
    assert [e.data for e in events] == [b"1"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=400), min_size=0, max_size=30))
def test_any_split_of_a_real_vllm_stream_gives_the_same_events(cuts):
    raw = fixture_file("vllm-cpu", "completions_stream_ids_logprobs.sse").read_bytes()
    whole, _ = frame_sse([(0, raw)])
    f = SSEFramer()
    pos = 0
    for k, c in enumerate(cuts):
        f.feed(raw[pos:pos + c], k)
        pos += c
    f.feed(raw[pos:], len(cuts))
    assert [e.data for e in f.close()] == [e.data for e in whole]
    assert len(whole) == 16 and whole[-1].data == b"[DONE]"


@settings(max_examples=100, deadline=None)
@given(st.lists(st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\n"), max_size=20), max_size=8),
       st.sampled_from([b"\n", b"\r\n", b"\r"]))
def test_round_trip_of_arbitrary_payloads_with_any_line_ending(payloads, eol):
    stream = b"".join(b"data: " + p.encode() + eol + eol for p in payloads)
    events, truncated = frame_sse([(0, stream)])
    assert [e.data.decode() for e in events] == payloads
    assert not truncated


_EVENT = st.one_of(
    st.binary(max_size=30).filter(lambda b: b"\n" not in b and b"\r" not in b).map(lambda b: b"data: " + b + b"\n\n"),
    st.binary(max_size=30).filter(lambda b: b"\n" not in b and b"\r" not in b).map(lambda b: b"data:" + b + b"\n\n"),
    st.just(b"event: usage\ndata: {}\n\n"), st.just(b"data: a\ndata: b\n\n"), st.just(b": keep-alive\n\n"),
    st.just(b"data: cut"), st.just(b"\n\n"), st.just(b"data: x\r\n\r\n"), st.just(b"event: e\n"),
    st.just(b"data: a\n"), st.just(b"data: y\r"))


@settings(max_examples=200, deadline=None)
@given(st.lists(_EVENT, max_size=12))
def test_a_read_of_one_whole_data_event_frames_as_its_lines_do(reads):
    """The one-event read's shortcut gives what the line-by-line framing gives: each read fed as its
    first byte and the rest, at its one time (which no shortcut takes), frames to the same events,
    times and cuts."""
    fast = [(k, r) for k, r in enumerate(reads)]
    slow = [(k, part) for k, r in enumerate(reads) for part in (r[:1], r[1:])]
    cut_fast: set[int] = set()
    cut_slow: set[int] = set()
    (ev_fast, tr_fast), (ev_slow, tr_slow) = frame_sse(fast, cut=cut_fast), frame_sse(slow, cut=cut_slow)
    assert [(e.t_ns, e.data, e.event) for e in ev_fast] == [(e.t_ns, e.data, e.event) for e in ev_slow]
    assert (tr_fast, cut_fast) == (tr_slow, cut_slow)


def test_the_one_event_shortcut_keeps_the_event_limit():
    f = SSEFramer(max_event_bytes=10)
    f.feed(b"data: 123456789\n\n", 0)  # 9 bytes and the line end: at the limit
    with pytest.raises(EventTooLarge):
        f.feed(b"data: 1234567890\n\n", 1)
