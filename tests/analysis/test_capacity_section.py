"""The summary's search section (loadgate.analysis.capacity) and its answer line (loadgate.report.capacity)
from hand-built levels whose TTFT passes or fails a threshold: the bracket, the answer, how the
search ended, and the words for a rate search and for one that stopped early."""

from __future__ import annotations

from typing import Any

from loadgate.analysis.capacity import search_section
from loadgate.analysis.summary import level_summary
from loadgate.records import Record
from loadgate.report.capacity import answer_line, verdict_word
from loadgate.report.search_plot import tick_labels
from tests.recs import make_record

MS = 1_000_000


def _level(load: str, ttft_ms: float) -> list[Record]:
    return [make_record(i=i, level=float(load), chunk_tokens=[1, 1], chunk_ns=[int(ttft_ms * MS), int((ttft_ms + 4) * MS)],
                        end_ns=int((ttft_ms + 4) * MS), output_tokens_planned=2) for i in range(20)]


def _profile(over: str, lo: float, hi: float, resolution: float) -> dict[str, Any]:
    return {"workload": {"token_mismatch_limit": 1.0},
            "load": {"search": {"over": over, "lo": lo, "hi": hi, "resolution": resolution}},
            "thresholds": {"ttft": ["p(50) < 10ms"]}}


def _section(profile: dict[str, Any], ttfts: dict[str, float]) -> Any:
    recs = {lv: _level(lv, ms) for lv, ms in ttfts.items()}
    levels = {lv: level_summary(rs, None, [], profile) for lv, rs in recs.items()}
    return search_section(profile, levels, recs)


def test_a_rate_search_brackets_its_answer_and_says_so_in_req_s() -> None:
    # the probes a search from 50 to 200 req/s runs when 93.75 passes and 96.88 fails (5 ms vs 50 ms)
    ttfts = {"50.0": 5, "100.0": 50, "75.0": 5, "87.5": 5, "93.75": 5, "96.88": 50}
    s = _section(_profile("rate", 50.0, 200.0, 0.05), ttfts)
    assert [p.level for p in s.probes] == list(ttfts) and [p.passed for p in s.probes] == [ttfts[k] == 5 for k in ttfts]
    assert (s.passing, s.failing, s.answer, s.ended) == (93.75, 96.88, 93.75, "answer below hi")
    assert s.probes[0].thresholds[0].observed == 5.0 and s.probes[1].thresholds[0].observed == 50.0
    assert [verdict_word(s, p) for p in s.probes][4:] == ["pass (answer)", "FAIL"]
    assert answer_line(s) == ("highest rate within the thresholds: 93.75 req/s (bracket 93.75–96.88 req/s, "
                              "resolution 5 %)")


def test_a_search_whose_probes_stopped_before_its_answer_ended_stopped() -> None:
    s = _section(_profile("concurrency", 1, 16, 0.25), {"1": 5, "2": 5})  # 4 would have been next
    assert (s.passing, s.failing, s.answer, s.ended) == (2.0, None, 2.0, "stopped")
    assert answer_line(s) == ("the search stopped before its answer (the run was interrupted or aborted): highest "
                              "passing concurrency so far 2, none failing yet")
    assert [verdict_word(s, p) for p in s.probes] == ["pass", "pass"]  # no answer marked: the search had none


def test_a_run_without_a_search_has_no_section() -> None:
    profile = {"workload": {"token_mismatch_limit": 1.0}, "load": {"concurrency": 2}}
    assert search_section(profile, {}, {}) is None


def test_the_plots_close_loads_keep_their_ticks_without_overprinting_labels() -> None:
    assert tick_labels([1, 2, 4, 8, 12, 14, 16], log=True) == ["1", "2", "4", "8", "12", "", "16"]
    assert tick_labels([50.0, 75.0, 87.5, 93.75, 96.88, 100.0], log=False) == ["50", "75", "87.5", "93.75", "", "100"]
