"""The server-metrics series file (`loadgate.core.series`): real recorded /metrics pages of vLLM,
SGLang and llama-server written as scrapes and read back whole, exactly; only changed values are
written after a source's first scrape; the cap stops the file within its size."""

from __future__ import annotations

import gzip
import math

import orjson

from loadgate.core.series import SeriesWriter, read_series
from loadgate.snapshot import Snapshot, parse_metrics
from tests.fixtures_path import fixture_file

PAGES = [("vllm-cpu", "metrics_before.txt"), ("vllm-cpu", "metrics_after.txt"), ("sglang-cpu", "metrics.out"),
         ("sglang-cpu", "metrics_after.txt"), ("llama-server", "metrics_before.txt"),
         ("llama-server", "metrics_after.txt")]


def page(engine: str, name: str) -> Snapshot:
    return parse_metrics(fixture_file(engine, name).read_text())


def lines(path):
    with gzip.open(path, "rb") as f:
        return [orjson.loads(x) for x in f]


def test_recorded_pages_of_three_engines_round_trip_exactly_through_the_delta_encoding(tmp_path):
    vb, va = page("vllm-cpu", "metrics_before.txt"), page("vllm-cpu", "metrics_after.txt")
    # a series that goes away: the after page without its histograms (the `x` list carries them)
    fewer = Snapshot({k: v for k, v in va.values.items() if not k[0].endswith(("_bucket", "_sum", "_count"))})
    sequence = [("server", vb), ("server", va), ("server", va), ("server", fewer), ("server", vb)]
    sequence += [("extra-1", page(*p)) for p in PAGES[2:]] + [("extra-2", page(*p)) for p in PAGES[:2]]
    w = SeriesWriter(tmp_path / "s.jsonl.gz", {"server": "u0", "extra-1": "u1", "extra-2": "u2"}, 0.5, 2**30)
    for t, (src, snap) in enumerate(sequence):
        assert w.scrape(1000 + t, src, snap)
    w.close()
    back = read_series(tmp_path / "s.jsonl.gz")
    assert back.header == {"series": 1, "clock": "perf_counter_ns", "interval_s": 0.5,
                           "sources": {"server": "u0", "extra-1": "u1", "extra-2": "u2"}}
    assert [(t, src) for t, src, _ in back.scrapes] == [(1000 + t, src) for t, (src, _) in enumerate(sequence)]
    for (_, _, got), (_, want) in zip(back.scrapes, sequence, strict=True):
        assert got.values == want.values  # every sample, every label, every value
    assert back.capped is None
    # the second identical scrape wrote no value; the fourth named what went away; names are interned once
    raw = lines(tmp_path / "s.jsonl.gz")[1:]
    assert "v" not in raw[2] and "n" not in raw[2]
    assert len(raw[3]["x"]) == len(va.values) - len(fewer.values) > 0
    assert "n" not in raw[4] and len(raw[4]["v"]) == sum(vb.values[k] != v for k, v in fewer.values.items() if k in vb.values) \
        + len(set(vb.values) - set(fewer.values))
    interned = [n[1] for d in raw for n in d.get("n", ())]
    assert len(interned) == len({k for _, s in sequence for k in s.values})


def test_a_value_that_is_not_finite_round_trips_and_a_nan_is_left_out_as_the_parser_leaves_it(tmp_path):
    text = "# TYPE g gauge\ng{a=\"1\"} +Inf\ng{a=\"2\"} -Inf\ng{a=\"3\"} NaN\ng{a=\"4\"} 2.5\n"
    snap = parse_metrics(text)
    w = SeriesWriter(tmp_path / "s.gz", {"server": "u"}, 0.5, 2**20)
    w.scrape(1, "server", snap)
    w.close()
    got = read_series(tmp_path / "s.gz").scrapes[0][2].values
    assert got == {("g", (("a", "1"),)): math.inf, ("g", (("a", "2"),)): -math.inf, ("g", (("a", "4"),)): 2.5}


def test_a_tiny_cap_stops_the_series_within_its_size_and_the_kept_scrapes_stay_exact(tmp_path):
    va = page("vllm-cpu", "metrics_after.txt")
    cap = 12_000  # about two of vLLM's pages, compressed
    w = SeriesWriter(tmp_path / "s.gz", {"server": "u"}, 0.5, cap)
    kept = 0
    for t in range(400):  # every scrape changes every counter: nothing compresses away
        snap = Snapshot({k: v + t for k, v in va.values.items()})
        if w.scrape(t, "server", snap):
            kept += 1
    size = w.close()
    assert w.capped is not None and 0 < kept < 400
    assert size <= cap + 1024 and (tmp_path / "s.gz").stat().st_size == size
    back = read_series(tmp_path / "s.gz")
    assert back.capped == w.capped and len(back.scrapes) == kept
    assert back.scrapes[-1][2].values == {k: v + (kept - 1) for k, v in va.values.items()}


def test_a_file_cut_short_reads_up_to_its_last_whole_line(tmp_path):
    va = page("vllm-cpu", "metrics_after.txt")
    w = SeriesWriter(tmp_path / "s.gz", {"server": "u"}, 0.5, 2**30)
    for t in range(200):
        w.scrape(t, "server", Snapshot({k: v + t for k, v in va.values.items()}))
    w.close()
    data = (tmp_path / "s.gz").read_bytes()
    (tmp_path / "cut.gz").write_bytes(data[: len(data) // 2])  # a process killed mid-file
    back = read_series(tmp_path / "cut.gz")
    assert 0 < len(back.scrapes) < 200
    assert [t for t, _, _ in back.scrapes] == list(range(len(back.scrapes)))
    assert back.scrapes[-1][2].values == {k: v + (len(back.scrapes) - 1) for k, v in va.values.items()}


def test_failures_and_window_marks_are_kept_in_order(tmp_path):
    w = SeriesWriter(tmp_path / "s.gz", {"server": "u", "extra-1": "v"}, 0.5, 2**20)
    w.mark(5, "begin", "4")
    w.failure(6, "extra-1", "unreachable")
    w.scrape(7, "server", page("llama-server", "metrics_after.txt"))
    w.mark(9, "end", "4")
    w.close()
    back = read_series(tmp_path / "s.gz")
    assert back.marks == [(5, "begin", "4"), (9, "end", "4")]
    assert back.failures == [(6, "extra-1", "unreachable")]
    assert [t for t, _ in back.of("server")] == [7] and back.of("extra-1") == []
