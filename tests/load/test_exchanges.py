"""The exchange log (`loadgate.load.exchanges`): what goes in comes out, on both transports; a cut
file keeps its whole frames; and the bounds a record gets are the same after the round trip."""

from __future__ import annotations

from pathlib import Path

import orjson

from loadgate.engine.adapters import adapter_for
from loadgate.engine.adapters.base import ErrorInfo
from loadgate.load.exchanges import Exchange, ExchangeLog, encode
from loadgate.load.exchanges import read as read_log
from loadgate.load.recorder import exchange_record
from loadgate.load.target import Raw, decode

MS = 1_000_000


def _sse(*events: bytes) -> bytes:
    return b"".join(b"data: " + e + b"\n\n" for e in events)


TOK = orjson.dumps({"choices": [{"index": 0, "text": " a", "finish_reason": None}]})


def _aiohttp_raw() -> Raw:
    """An aiohttp-path exchange: payload reads with the floors noted as they came."""
    raw = Raw(start_ns=1 * MS, headers_ns=2 * MS, end_ns=40 * MS, status=200,
              reads=[(10 * MS, _sse(TOK)), (30 * MS, _sse(TOK, TOK)), (40 * MS, _sse(b"[DONE]"))])
    raw.prev_read_of = {10 * MS: 2 * MS, 30 * MS: 10 * MS, 40 * MS: 30 * MS}
    return raw


def _socket_raw() -> Raw:
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    body = b"".join(b"%x\r\n%b\r\n" % (len(e), e) for e in (_sse(TOK), _sse(TOK), _sse(b"[DONE]")))
    return Raw(start_ns=1 * MS, sent_ns=1 * MS, stamp_source="kernel", new_connection=True, read_lag_max_ns=7,
               socket_reads=[(2 * MS, head), (10 * MS, body[:40]), (20 * MS, body[40:] + b"0\r\n\r\n")],
               read_begin=[(2 * MS, 2 * MS, 0, False, False, 0), (10 * MS, 10 * MS, 9 * MS, True, False, 3 * MS),
                           (20 * MS, 20 * MS, 12 * MS, False, True, 12 * MS)],
               error=ErrorInfo("disconnect", "x"))


def _roundtrip(tmp: Path, raw: Raw) -> Raw:
    log = ExchangeLog(tmp / "x.lgx", {"api": "openai-completions"})
    log.add(Exchange(3, False, 8, 2, 0, 4, 0, None, raw))
    log.close()
    contents = read_log(tmp / "x.lgx")
    assert contents is not None and contents.meta["api"] == "openai-completions"
    (x,) = list(contents.exchanges)
    return x.raw


def test_an_exchange_comes_back_whole_on_both_transports(tmp_path):
    for raw in (_aiohttp_raw(), _socket_raw()):
        back = _roundtrip(tmp_path, raw)
        for f in ("start_ns", "headers_ns", "end_ns", "status", "reads", "socket_reads", "stamp_source",
                  "read_lag_max_ns", "new_connection", "sent_ns", "prev_read_of", "error"):
            assert getattr(back, f) == getattr(raw, f), f
        assert [tuple(b) for b in back.read_begin] == [tuple(b) for b in raw.read_begin]


def test_the_aiohttp_paths_bounds_survive_the_log(tmp_path):
    """The aiohttp path notes each read's floor while it receives: the record made from the log
    carries the same bounds as one made from the exchange itself (they were all 0 once)."""
    adapter = adapter_for("openai-completions")
    x = Exchange(0, False, 8, 3, 0, 4, 0, None, _aiohttp_raw())
    direct = exchange_record(x, decode(adapter, True, x.raw), 0)
    back = Exchange(0, False, 8, 3, 0, 4, 0, None, _roundtrip(tmp_path, _aiohttp_raw()))
    again = exchange_record(back, decode(adapter, True, back.raw), 0)
    assert direct.chunk_early_ns == again.chunk_early_ns == [0, 20 * MS, 0]  # the first of two read together


def test_a_cut_log_keeps_its_whole_frames(tmp_path):
    log = ExchangeLog(tmp_path / "c.lgx", {"api": "openai-completions"}, batch_bytes=1)  # a batch per exchange
    for i in range(5):
        log.add(Exchange(i, False, 8, 2, 0, 4, 0, None, _aiohttp_raw()))
    log.close()
    data = (tmp_path / "c.lgx").read_bytes()
    frame = len(encode(Exchange(0, False, 8, 2, 0, 4, 0, None, _aiohttp_raw())))
    (tmp_path / "c.lgx").write_bytes(data[:-frame // 2])  # the last frame cut in half
    contents = read_log(tmp_path / "c.lgx")
    assert contents is not None and [x.i for x in contents.exchanges] == [0, 1, 2, 3]


def test_logs_from_elsewhere_are_skipped_by_recover_not_a_traceback(tmp_path):
    """A log whose first frame is not this format's object, or names an API loadgate does not know,
    is left unread by `recover` (report then says what it could read); a good one beside it is read."""
    from loadgate.load.exchanges import HEAD, MAGIC
    from loadgate.load.recorder import recover

    logs = tmp_path / "exchanges"
    logs.mkdir()
    h = b"[1, 2]"
    (logs / "a.lgx").write_bytes(HEAD.pack(MAGIC, len(h), 0) + h)
    bad = ExchangeLog(logs / "b.lgx", {"api": "no-such-api", "stream": True, "max_event_bytes": 1 << 20})
    bad.add(Exchange(0, False, 8, 2, 0, 4, 0, None, _aiohttp_raw()))
    bad.close()
    good = ExchangeLog(logs / "c.lgx", {"api": "openai-completions", "stream": True, "max_event_bytes": 1 << 20,
                                        "prompt_overhead": 0})
    good.add(Exchange(7, False, 8, 3, 0, 4, 0, None, _aiohttp_raw()))
    good.close()
    records, read = recover(tmp_path)
    assert [r.i for r in records] == [7] and read == [logs / "c.lgx"]


def test_a_tail_reads_a_growing_log_frame_by_frame_and_waits_for_a_cut_one(tmp_path):
    """The abort watcher reads a phase's log while the phase writes it: each call gives the whole
    exchanges appended since the last; a frame still being written is given once it is whole."""
    from loadgate.load.exchanges import Tail

    path = tmp_path / "t.lgx"
    tail = Tail(path)
    assert tail.new() == [] and tail.meta is None  # no log yet
    log = ExchangeLog(path, {"api": "openai-completions"}, batch_bytes=1)  # a batch per exchange
    log.add(Exchange(0, False, 8, 2, 0, 4, 0, None, _aiohttp_raw()))
    log.add(Exchange(1, False, 8, 2, 0, 4, 0, None, _aiohttp_raw()))
    assert [x.i for x in tail.new()] == [0, 1] and tail.meta is not None and tail.meta["api"] == "openai-completions"
    assert tail.new() == []
    frame = encode(Exchange(2, False, 8, 2, 0, 4, 0, None, _aiohttp_raw()))
    with open(path, "ab") as f:  # a batch half written
        f.write(frame[:len(frame) // 2])
    assert tail.new() == []
    with open(path, "ab") as f:
        f.write(frame[len(frame) // 2:])
    (x,) = tail.new()
    assert x.i == 2 and x.raw.reads == _aiohttp_raw().reads
    log.close()
    tail.close()
