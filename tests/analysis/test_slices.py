"""Time slices (`report.slice_s`) on hand-built records whose right answers are worked out here:
which slice a request and a token count in, the last slice marked partial, the slices' tokens adding
up to the level's, and the summary carrying them (null when off, and from a v8 summary)."""

from __future__ import annotations

import pytest

from loadgate.analysis.metrics import throughput
from loadgate.analysis.slices import time_slices
from loadgate.analysis.summary import STREAM_ONLY, LevelSummary, Summary, level_summary
from loadgate.config.profile import MAX_SLICES
from loadgate.jsonutil import load_json
from loadgate.records import Record
from tests.fixtures_path import DATA
from tests.recs import make_record

MS = 1_000_000


def rec(start_ms: float, chunks: list[tuple[float, int]], end_ms: float, *, intended_ms: float | None = None,
        failed: bool = False, i: int = 0) -> Record:
    """A request started at `start_ms` whose chunks (ms after the start, tokens) arrived as given."""
    return make_record(i=i, start_ns=int(start_ms * MS), ready_ns=int(start_ms * MS), end_ns=int(end_ms * MS),
                       intended_ns=None if intended_ms is None else int(intended_ms * MS),
                       chunk_ns=[int(c * MS) for c, _ in chunks], chunk_tokens=[n for _, n in chunks],
                       error={"kind": "timeout", "detail": "x"} if failed else None, status=None if failed else 200)


# slices of 1 s over a window [0, 2.5 s]: [0, 1), [1, 2), [2, 2.5] (partial)
RECORDS = [
    rec(0, [(100, 1), (600, 1)], 700, i=0),  # slice 0; its tokens arrive at 0.1 and 0.6 s: slice 0
    rec(900, [(300, 2), (500, 3)], 1500, i=1),  # starts in slice 0; its tokens arrive at 1.2 and 1.4 s: slice 1
    rec(1000, [(200, 4)], 2500, i=2),  # starts on the boundary: slice 1
    rec(1500, [(50, 1)], 1600, failed=True, i=3),  # slice 1, failed: its token is in no throughput
]


def test_requests_count_in_the_slice_they_started_in_and_tokens_in_the_one_they_arrived_in() -> None:
    got = time_slices(RECORDS, 1.0)
    assert got is not None
    assert (got["slice_s"], got["window_s"], got["requests_by"], got["tokens_by"]) == (1.0, 2.5, "origin", "arrival")
    s0, s1, s2 = got["slices"]
    assert [(s["start_s"], s["end_s"], s["partial"]) for s in got["slices"]] == [
        (0.0, 1.0, False), (1.0, 2.0, False), (2.0, 2.5, True)]
    assert [(s["requests"], s["succeeded"], s["failed"]) for s in got["slices"]] == [(2, 2, 0), (2, 1, 1), (0, 0, 0)]
    assert [s["output_tokens"] for s in got["slices"]] == [2, 9, 0]
    assert [s["output_throughput"] for s in got["slices"]] == [2.0, 9.0, 0.0]  # the last over its own 0.5 s
    # slice 0: ttft 100 and 300 ms, e2e 700 and 600 ms; itl 500 ms (r0) and 3 x 200/3 ms (r1's 3-token chunk)
    assert s0["metrics"]["ttft"] == {"unit": "ms", "count": 2, "p50": 200.0, "p99": pytest.approx(298.0)}
    assert s0["metrics"]["e2e"]["p50"] == 650.0 and s0["metrics"]["e2e"]["p99"] == pytest.approx(699.0)
    assert s0["metrics"]["itl"]["count"] == 4 and s0["metrics"]["itl"]["p50"] == pytest.approx(200 / 3)
    # slice 1: only r2 succeeded (r3's failure is counted, not timed)
    assert s1["metrics"]["ttft"]["p50"] == 200.0 and s1["metrics"]["e2e"]["p50"] == 1500.0
    assert s1["metrics"]["itl"] == {"unit": "ms", "count": 0, "p50": None, "p99": None}  # one chunk: no gap
    assert s2["metrics"]["e2e"] == {"unit": "ms", "count": 0, "p50": None, "p99": None}  # nobody started: n/a


def test_the_slices_tokens_add_up_to_the_levels_throughput() -> None:
    got = time_slices(RECORDS, 0.3)
    assert got is not None
    level = throughput(RECORDS)
    assert len(got["slices"]) == 9 and got["slices"][-1]["end_s"] == 2.5 and got["slices"][-1]["partial"]
    assert sum(s["output_tokens"] for s in got["slices"]) == 11
    assert sum(s["output_throughput"] * (s["end_s"] - s["start_s"]) for s in got["slices"]) \
        == pytest.approx(level["output_token_throughput"] * level["window_s"])
    assert sum(s["requests"] for s in got["slices"]) == len(RECORDS)


def test_a_slice_that_divides_the_window_leaves_no_partial_slice() -> None:
    got = time_slices(RECORDS, 0.5)
    assert got is not None
    assert len(got["slices"]) == 5 and not any(s["partial"] for s in got["slices"])
    assert got["slices"][-1]["output_tokens"] == 0  # r2's last byte at 2.5 s closes the window: in the last slice


def test_an_open_loop_request_counts_from_its_intended_start() -> None:
    late = rec(1050, [(100, 2)], 1200, intended_ms=950)  # due in slice 0, sent in slice 1
    first = rec(0, [(100, 1)], 200, intended_ms=0, i=1)
    got = time_slices([first, late], 1.0)
    assert got is not None
    s0, s1 = got["slices"]
    assert (s0["requests"], s1["requests"]) == (2, 0)
    assert (s0["output_tokens"], s1["output_tokens"]) == (1, 2)  # its tokens arrived at 1.15 s
    assert s0["metrics"]["ttft"]["count"] == 2 and s0["metrics"]["ttft"]["p99"] == pytest.approx(199.0)  # 100 and 200 ms


def test_off_gives_none_and_no_records_give_no_slices() -> None:
    assert time_slices(RECORDS, None) is None
    assert time_slices([], 1.0) == {"slice_s": 1.0, "requests_by": "origin", "tokens_by": "arrival",
                                    "window_s": None, "too_many": None, "slices": []}


def test_the_level_summary_carries_the_profiles_slices_and_an_unstreamed_run_keeps_only_e2e() -> None:
    base = {"workload": {"token_mismatch_limit": 0.0}}
    assert level_summary(RECORDS, None, [], base).slices is None  # a profile from before report: off
    on = level_summary(RECORDS, None, [], {**base, "report": {"slice_s": 1.0}})
    assert on.slices == time_slices(RECORDS, 1.0)
    assert LevelSummary.from_json(on.to_json()).slices == on.slices
    unstreamed = level_summary(RECORDS, None, [], {**base, "report": {"slice_s": 1.0}, "load": {"stream": False}})
    assert unstreamed.slices == time_slices(RECORDS, 1.0, STREAM_ONLY)
    assert unstreamed.slices is not None and list(unstreamed.slices["slices"][0]["metrics"]) == ["e2e"]


def test_a_version_8_summary_reads_with_no_slices() -> None:
    old = load_json(DATA / "runs-v8" / "single" / "summary.json")
    assert old["summary_version"] == 8 and all("slices" not in lv for lv in old["levels"].values())
    assert all(lv.slices is None for lv in Summary.from_json(old).levels.values())


def test_a_window_that_needs_more_than_the_most_slices_keeps_none_and_says_how_many() -> None:
    assert MAX_SLICES == 10_000
    got = time_slices(RECORDS, 0.0002)  # 2.5 s / 0.2 ms
    assert got is not None and got["slices"] == [] and got["too_many"] == 12_500 and got["window_s"] == 2.5
    at_most = time_slices(RECORDS, 0.00025)
    assert at_most is not None and len(at_most["slices"]) == MAX_SLICES and at_most["too_many"] is None
