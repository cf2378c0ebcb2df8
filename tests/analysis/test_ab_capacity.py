"""The capacity line of an A/B of searches (loadgate.analysis.abcapacity) and its words
(loadgate.report.capacity) from hand-built search sections: the ratio of the answers, its interval from
the two brackets, the ends that do not exist said in words, the combination of several pairs and the
decision against ab.practical."""

from __future__ import annotations

import statistics

import pytest

from loadgate.analysis.abcapacity import capacity_line, decide, interval_words
from loadgate.analysis.capacity import BELOW_HI, HI_PASSED, LOWEST_FAILED, SearchSection
from loadgate.report.capacity import ab_capacity_text, pair_words


def section(passing: float | None, failing: float | None, ended: str = BELOW_HI, over: str = "rate") -> SearchSection:
    return SearchSection(over, 1.0, 512.0, 0.05, [], passing, failing, passing, ended)


def test_the_ratio_is_the_answers_and_its_interval_comes_from_the_two_brackets() -> None:
    line = capacity_line([("A1", section(48, 52))], [("B1", section(68, 72))], 0.05)
    assert line is not None
    p = line.pairs[0]
    assert (p.ratio, p.low, p.high) == (68 / 48, 68 / 52, 72 / 48)  # 1.417 (1.308-1.500)
    assert p.low is not None and p.ratio is not None and p.high is not None and p.low < p.ratio < p.high
    assert pair_words("rate", p) == ("candidate serves 1.42× (1.31–1.50) the rate within the thresholds (baseline "
                                     "48 req/s, bracket 48–52 req/s; candidate 68 req/s, bracket 68–72 req/s)")
    assert line.decision == "improved"  # the whole interval above 1 + 5 %


def test_a_candidate_whose_hi_passed_has_no_upper_end_and_reads_at_least() -> None:
    line = capacity_line([("A1", section(40, 44))], [("B1", section(512, None, HI_PASSED))], 0.05)
    assert line is not None
    p = line.pairs[0]
    assert (p.ratio, p.low, p.high) == (512 / 40, 512 / 44, None)
    assert pair_words("rate", p) == ("candidate serves 12.80×, at least 11.64× (no upper end) the rate within the "
                                     "thresholds (baseline 40 req/s, bracket 40–44 req/s; candidate 512 req/s, its "
                                     "hi, which passed: no failing end)")
    assert line.decision == "improved"


def test_a_baseline_whose_hi_passed_has_no_lower_end_and_reads_at_most() -> None:
    line = capacity_line([("A1", section(512, None, HI_PASSED))], [("B1", section(300, 330))], 0.05)
    assert line is not None
    p = line.pairs[0]
    assert (p.ratio, p.low, p.high) == (300 / 512, None, 330 / 512)
    assert interval_words(p.ratio, p.low, p.high) == "0.59×, at most 0.64× (no lower end)"
    assert line.decision == "regressed"  # even its high is below 1 - 5 %


def test_a_side_whose_lowest_probe_failed_has_no_answer_and_no_ratio() -> None:
    base_failed = capacity_line([("A1", section(None, 1, LOWEST_FAILED, "concurrency"))],
                                [("B1", section(8, 9, over="concurrency"))], 0.05)
    assert base_failed is not None
    p = base_failed.pairs[0]
    assert (p.ratio, p.low, p.high) == (None, 8.0, None)  # the baseline serves less than 1: at least 8x
    assert pair_words("concurrency", p) == ("candidate serves at least 8.00× (no upper end) the concurrency within "
                                            "the thresholds (baseline none: its lowest probe, 1, failed; candidate 8, "
                                            "bracket 8–9)")
    assert base_failed.decision == "improved"
    cand_failed = capacity_line([("A1", section(8, 9, over="concurrency"))],
                                [("B1", section(None, 1, LOWEST_FAILED, "concurrency"))], 0.05)
    assert cand_failed is not None
    q = cand_failed.pairs[0]
    assert (q.ratio, q.low, q.high) == (None, None, 1 / 8)
    assert interval_words(q.ratio, q.low, q.high) == "at most 0.12× (no lower end)"
    both = capacity_line([("A1", section(None, 1, LOWEST_FAILED))], [("B1", section(None, 1, LOWEST_FAILED))], 0.05)
    assert both is not None and interval_words(both.ratio, both.low, both.high) == "?× (no bound on either end)"
    assert both.decision == "inconclusive"


def test_several_pairs_give_the_median_ratio_and_the_widest_interval() -> None:
    base = [("A1", section(50, 55)), ("A2", section(48, 52)), ("A3", section(52, 56))]
    cand = [("B1", section(70, 75)), ("B2", section(66, 70)), ("B3", section(75, 80))]
    line = capacity_line(base, cand, 0.05)
    assert line is not None
    assert [p.pair for p in line.pairs] == [1, 2, 3]
    assert line.ratio == statistics.median([70 / 50, 66 / 48, 75 / 52])
    assert (line.low, line.high) == (min(70 / 55, 66 / 52, 75 / 56), max(75 / 50, 70 / 48, 80 / 52))
    text = ab_capacity_text(line)
    assert text.splitlines()[0] == "capacity (A/B of searches over rate):"
    assert text.splitlines()[2].startswith("pair 2 (A2, B2): candidate serves 1.38× (1.27–1.46) the rate")
    assert (f"over 3 pairs: candidate serves {line.ratio:.2f}× ({line.low:.2f}–{line.high:.2f}) the rate within the "
            "thresholds (the median of the pairs' ratios; the widest interval: the lowest of the pairs' lows and the "
            "highest of their highs)") in text
    # one pair without an end leaves the combined interval without it
    hi = capacity_line(base[:2], [cand[0], ("B2", section(512, None, HI_PASSED))], 0.05)
    assert hi is not None and hi.high is None and hi.low == pytest.approx(min(70 / 55, 512 / 52))


@pytest.mark.parametrize(("low", "high", "decision"), [
    (0.80, 0.94, "regressed"),  # the whole interval below 1 - practical
    (None, 0.94, "regressed"),
    (0.90, 1.20, "inconclusive"),  # straddles 0.95
    (None, 0.96, "inconclusive"),
    (None, None, "inconclusive"),
    (0.96, 1.04, "no change"),  # within 1 ± practical
    (0.95, 1.30, "no regression"),  # at or above 0.95, reaching beyond 1.05
    (0.97, None, "no regression"),
    (1.06, None, "improved"),
    (1.06, 1.50, "improved"),
])
def test_the_decision_regresses_only_when_the_whole_interval_is_below_one_minus_practical(
        low: float | None, high: float | None, decision: str) -> None:
    assert decide(low, high, 0.05) == decision


def test_an_ab_without_searches_has_no_capacity_line() -> None:
    assert capacity_line([], [("B1", section(8, 9))], 0.05) is None
