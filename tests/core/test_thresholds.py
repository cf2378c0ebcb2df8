"""Threshold grammar and evaluation against level summaries built from hand-made records."""

from __future__ import annotations

import dataclasses
import math
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadgate.analysis.summary import Acceptance, LevelSummary, level_summary
from loadgate.core.thresholds import (
    Outcome,
    Threshold,
    ThresholdError,
    evaluate,
    evaluate_all,
    metrics,
    parse,
    parse_all,
    to_json,
)
from loadgate.errors import UsageError
from loadgate.records import Record
from loadgate.report.thresholds import render

MS = 1_000_000
PROFILE: dict[str, Any] = {"workload": {"token_mismatch_limit": 1.0}, "slo": {"ttft_ms": 150}}


def rec(i: int, ttft_ms: float, *, error: dict[str, str] | None = None, spec: dict[str, Any] | None = None
        ) -> Record:
    """A closed-loop request started at 0: three one-token chunks 20 ms apart after its TTFT."""
    chunks = [] if error else [ttft_ms, ttft_ms + 20, ttft_ms + 40]
    end = chunks[-1] if chunks else 5
    return Record.from_json({"v": 2, "i": i, "warmup": False, "level": 1, "intended_ns": None, "ready_ns": 0, "start_ns": 0,
            "headers_ns": None, "end_ns": int(end * MS), "status": 503 if error else 200, "error": error,
            "prompt_tokens_planned": 10, "output_tokens_planned": len(chunks), "prompt_tokens": 10,
            "completion_tokens": len(chunks), "chunk_ns": [int(c * MS) for c in chunks],
            "chunk_tokens": [1] * len(chunks), "token_source": "ids", "finish_reason": "length", "spec": spec})


FAIL = {"kind": "http_status", "detail": "HTTP 503"}
# TTFTs 100, 110, …, 190 ms: p50 145, p90 181, p95 185.5, p99 189.1, p99.9 189.91, mean 145.
CLEAN = level_summary([rec(k, 100 + 10 * k) for k in range(10)], None, [], PROFILE)
# The same plus one failed request: errors rate 1/11, error-adjusted p99 = +inf.
WITH_FAILURE = level_summary([rec(k, 100 + 10 * k) for k in range(10)] + [rec(10, 0, error=FAIL)],
                             None, [], PROFILE)
ALL_FAILED = level_summary([rec(k, 0, error=FAIL) for k in range(3)], None, [], PROFILE)


def check(metric: str, text: str, summary: LevelSummary = CLEAN,
          baseline: LevelSummary | None = None) -> Outcome:
    return evaluate(parse(metric, text), summary, baseline)


def test_summary_fixture_has_the_figures_the_tests_rely_on():
    m = CLEAN.metrics["ttft"]
    assert (m["p50"], m["min"], m["max"]) == (145.0, 100.0, 190.0)
    assert m["p99"] == pytest.approx(189.1)
    assert WITH_FAILURE.failed == 1 and math.isinf(WITH_FAILURE.metrics["ttft_error_adjusted"]["p99"])


@pytest.mark.parametrize(("text", "passed"), [
    ("avg < 146", True), ("avg < 145", False), ("avg <= 145", True), ("avg <= 144.9", False),
    ("avg > 144", True), ("avg > 145", False), ("avg >= 145", True), ("avg >= 145.1", False),
    ("avg == 145", True), ("avg == 146", False), ("avg != 146", True), ("avg != 145", False),
])
def test_every_comparator_compares_measured_to_limit(text: str, passed: bool):
    o = check("ttft", text)
    assert o.passed is passed and o.measured == 145.0 and o.reason is None


@pytest.mark.parametrize(("aggregation", "expected"), [
    ("p(50)", 145.0), ("p(90)", 181.0), ("p(95)", 185.5), ("p(99)", 189.1), ("p(99.9)", 189.91),
    ("avg", 145.0), ("mean", 145.0), ("med", 145.0), ("min", 100.0), ("max", 190.0),
])
def test_every_aggregation_reads_its_statistic(aggregation: str, expected: float):
    o = check("ttft", f"{aggregation} < 1s")
    assert o.measured == pytest.approx(expected) and o.passed and o.limit == 1000.0


def test_percentile_key_is_formatted_like_the_summary():
    assert parse("ttft", "p(99.9) < 1").stat_key == "p99.9"
    assert parse("ttft", "p(99.0) < 1").aggregation == "p(99)"
    assert parse("itl", "p(90) < 1").stat_key == "p90"


def test_time_units_normalize_to_milliseconds_exactly():
    values = {parse("ttft", f"p(99) < {t}").value for t in ("0.8s", "800ms", "800000us", "800", "0.8 s")}
    assert values == {800.0}
    assert parse("ttft", "p(99) < 0.8s").unit == "s" and parse("ttft", "p(99) < 800").unit is None
    assert check("ttft", "p(99) < 0.19s").passed and not check("ttft", "p(99) < 189000us").passed


def test_whitespace_does_not_matter():
    a, b = parse("ttft", "p(99)<800ms"), parse("ttft", "  p ( 99 )   <   800 ms ")
    assert (a.aggregation, a.comparator, a.value) == (b.aggregation, b.comparator, b.value)
    assert parse("output_throughput", ">1500tok / s").value == 1500.0


def test_percent_divides_by_100_for_ratios():
    assert parse("errors", "rate < 1%").value == 0.01
    assert check("errors", "rate < 10%", WITH_FAILURE).passed  # 1/11 = 9.1 %
    assert not check("errors", "rate < 9%", WITH_FAILURE).passed
    assert check("goodput", ">= 50%").passed and not check("goodput", "> 60%").passed  # 6 of 10 within 150 ms


def test_errors_rate_and_count():
    o = check("errors", "rate < 0.01", WITH_FAILURE)
    assert o.measured == pytest.approx(1 / 11) and not o.passed
    assert check("errors", "count == 0").passed and check("errors", "rate == 0").passed
    o = check("errors", "count == 0", WITH_FAILURE)
    assert o.measured == 1.0 and not o.passed
    assert check("errors", "count <= 1", WITH_FAILURE).passed


def test_scalar_metrics_read_throughput_goodput_and_acceptance():
    window = CLEAN.throughput.window_s
    assert window == pytest.approx(0.23)
    o = check("output_throughput", "> 1500")
    assert o.measured == pytest.approx(30 / window) and not o.passed
    assert check("output_throughput", "> 100 tok/s").passed
    assert check("input_throughput", "> 100 tok/s").measured == pytest.approx(100 / window)
    assert check("request_throughput", ">= 40 req/s").measured == pytest.approx(10 / window)
    assert check("goodput", "== 0.6").passed
    # the 6 requests within the slo (ttft 100 … 150 ms) received 3 tokens each
    assert check("token_goodput", "> 70 tok/s").measured == pytest.approx(18 / window)


def test_acceptance_length_from_per_request_then_counters():
    spec = {"source": "vllm", "verify_steps": 1, "accepted": 1, "draft_tokens": 2}
    s = level_summary([rec(k, 100, spec=spec) for k in range(4)], None, [], PROFILE)
    assert check("acceptance_length", "> 1.9", s).measured == pytest.approx(2.0)
    fallback = dataclasses.replace(CLEAN, acceptance=Acceptance(None, {"acceptance_length": 2.7}))
    o = check("acceptance_length", "> 2.5", fallback)
    assert o.passed and o.measured == 2.7
    o = check("acceptance_length", "> 2.5")
    assert not o.passed and o.reason is not None and o.reason.startswith("n/a")


def test_baseline_factor_and_shift_resolve_against_the_baseline_summary():
    slower = level_summary([rec(k, 100 + 10 * k) for k in range(8)], None, [], PROFILE)
    o = check("output_throughput", "> baseline * 0.95", CLEAN, slower)
    assert o.limit == pytest.approx(0.95 * slower.throughput.output_token_throughput) and o.passed
    assert not check("output_throughput", "> baseline * 110%", slower, CLEAN).passed
    o = check("ttft", "p(50) <= baseline + 5ms", CLEAN, slower)
    assert o.limit == pytest.approx(135 + 5) and not o.passed
    assert check("ttft", "p(50) <= baseline + 0.01s", CLEAN, slower).limit == pytest.approx(145)
    assert check("ttft", "p(50) >= baseline - 10", CLEAN, slower).passed
    assert check("ttft", "avg == baseline", CLEAN, CLEAN).passed


def test_baseline_without_a_baseline_summary_fails():
    o = check("output_throughput", "> baseline * 0.95", CLEAN, None)
    assert not o.passed and o.limit is None and o.reason == "no baseline in this run"
    assert o.measured == pytest.approx(CLEAN.throughput.output_token_throughput)
    o = check("ttft", "p(99) < baseline", CLEAN, ALL_FAILED)
    assert not o.passed and o.reason == "baseline n/a: no samples"


def test_no_samples_fails_the_threshold():
    o = check("ttft", "p(99) < 1s", ALL_FAILED)
    assert (o.passed, o.measured, o.reason) == (False, None, "n/a: no samples")
    assert not check("ttft", "p(99) > 0", ALL_FAILED).passed
    assert not check("errors", "count == 0", level_summary([], None, [], PROFILE)).passed
    assert not check("goodput", "> 0.5", dataclasses.replace(CLEAN, goodput=None)).passed
    o = check("token_goodput", "> 1 tok/s", dataclasses.replace(CLEAN, goodput=None))
    assert not o.passed and o.reason == "n/a: no goodput (the profile sets no slo)"


def test_infinity_from_failed_requests_fails_less_than_thresholds():
    o = check("ttft_error_adjusted", "p(99) < 1s", WITH_FAILURE)
    assert math.isinf(o.measured or 0) and not o.passed and o.reason and "+inf" in o.reason
    assert not check("e2e_error_adjusted", "max <= 1000s", WITH_FAILURE).passed
    assert check("ttft_error_adjusted", "p(99) > 1s", WITH_FAILURE).passed
    assert check("ttft", "p(99) < 1s", WITH_FAILURE).passed  # the plain metric leaves failures out
    assert check("tpot_error_adjusted", "p(50) < 25ms", WITH_FAILURE).measured == 20.0


@pytest.mark.parametrize(("metric", "text", "reason"), [
    ("ttft", "p(99) < 800 parsecs", "unknown unit 'parsecs' (expected us, ms or s)"),
    ("ttft", "< 800ms", "ttft is a distribution: start with an aggregation"),
    ("goodput", "avg > 0.9", "goodput is a single figure: write no aggregation"),
    ("ttft", "rate < 0.01", "rate is only for errors"),
    ("errors", "< 3", "errors needs rate or count"),
    ("errors", "p(99) < 3", "errors needs rate or count"),
    ("ttft", "p(75) < 800ms", "p(75) is not in summaries (available: p(50), p(90), p(95), p(99) or p(99.9))"),
    ("ttft", "p99 < 800ms", "expected '(' after 'p' (write p(99))"),
    ("ttft", "p(99 < 800ms", "expected ')' to close p("),
    ("ttft", "p() < 800ms", "expected a percentile inside p( ), got ')'"),
    ("ttft", "p(99) = 800ms", "'=' is not a comparator (did you mean ==?)"),
    ("ttft", "p(99) =< 800ms", "'=<' is not a comparator (did you mean <=?)"),
    ("ttft", "p(99) 800ms", "expected a comparator (<, <=, >, >=, == or !=), got '800'"),
    ("ttft", "p(99) <", "expected a number or baseline after <, got the end"),
    ("ttft", "p(99) < ms", "expected a number or baseline after <, got 'ms'"),
    ("ttft", "p(99) < 800ms 900", "unexpected '900' after the threshold"),
    ("ttft", "p(99) < 800 # fast", "unexpected character '#'"),
    ("ttft", "", "empty threshold"),
    ("ttft", "mena < 800", "unknown aggregation 'mena'"),
    ("ttft", "p(99) < 5 tok/s", "unit 'tok/s' does not fit ttft (expected us, ms or s)"),
    ("token_goodput", "> 5%", "unit '%' does not fit token_goodput (expected tok/s)"),
    ("output_throughput", "> 1500 ms", "unit 'ms' does not fit output_throughput (expected tok/s)"),
    ("request_throughput", "> 10 tok/s", "unit 'tok/s' does not fit request_throughput (expected req/s)"),
    ("ttft", "p(99) < 8%", "unit '%' does not fit ttft"),
    ("errors", "count < 1%", "unit '%' does not fit errors (errors takes a bare number)"),
    ("tokens_per_chunk", "avg > 2 ms", "tokens_per_chunk takes a bare number"),
    ("ttft", "p(99) < baseline x 2", "expected *, + or - after baseline, got 'x'"),
    ("ttft", "p(99) < baseline * 2ms", "a baseline factor takes no unit (or %), got 'ms'"),
    ("ttft", "p(99) < baseline + 5%", "for a relative margin write baseline * 1.05"),
    ("ttft", "p(99) < baseline +", "expected a number after 'baseline +', got the end"),
    ("ttft", "p(99) < -5", "expected a number or baseline after <, got '-'"),
    ("tftt", "p(99) < 800ms", "unknown metric 'tftt'; did you mean ttft?"),
])
def test_malformed_thresholds_give_one_line_errors(metric: str, text: str, reason: str):
    with pytest.raises(ThresholdError) as info:
        parse(metric, text)
    msg = str(info.value)
    assert msg.startswith(f'threshold {metric} "{text}": ') and reason in msg and "\n" not in msg
    assert info.value.exit_code == 2 and isinstance(info.value, UsageError)


def test_parse_all_keeps_order_and_suggests_close_metric_names():
    ts = parse_all({"ttft": ["p(99) < 800ms", "p(50) < 200ms"], "errors": ("rate < 0.01",)})
    assert [(t.metric, t.text) for t in ts] == [("ttft", "p(99) < 800ms"), ("ttft", "p(50) < 200ms"),
                                                ("errors", "rate < 0.01")]
    with pytest.raises(ThresholdError, match=r'threshold output_thruput "> 1500": unknown metric '
                                             r"'output_thruput'; did you mean output_throughput\?"):
        parse_all({"output_thruput": ["> 1500"]})
    with pytest.raises(ThresholdError, match="unknown metric 'itl_error_adjusted'"):
        parse_all({"itl_error_adjusted": ["p(99) < 1s"]})
    with pytest.raises(ThresholdError, match="thresholds ttft: expected a list of strings"):
        parse_all({"ttft": "p(99) < 800ms"})  # type: ignore[dict-item]


def test_every_metric_name_accepts_a_threshold():
    from loadgate.core.figures import figure

    for metric in metrics():
        kind = figure(metric.removesuffix("_error_adjusted")).kind
        text = "rate < 1%" if metric == "errors" else "p(99) >= 0" if kind == "distribution" else ">= 0"
        outcome = evaluate(parse(metric, text), CLEAN)
        if metric in ("acceptance_length", "reasoning_tokens", "answer_tokens"):
            # the clean run has no speculation and no reasoning phase: n/a fails, never passes
            assert not outcome.passed and outcome.reason.startswith("n/a"), outcome
            continue
        # every other figure of the clean run is measured and non-negative, its error rate 0 %
        assert outcome.passed and outcome.measured is not None, (metric, text, outcome)


def test_render_lists_every_threshold_and_counts():
    ts = parse_all({"ttft": ["p(99) < 800ms", "p(50) < 100ms"], "errors": ["rate < 1%"],
                    "output_throughput": ["> baseline * 0.95"], "ttft_error_adjusted": ["p(99) < 1s"]})
    text = render(evaluate_all(ts, WITH_FAILURE))
    lines = text.splitlines()
    assert lines[-1] == "thresholds: 1 passed, 4 failed"
    assert "ttft p(99) < 800ms" in text and "189.1 ms" in text and "800 ms" in text
    assert "9.091%" in text and "1%" in text and "+inf" in text and "n/a" in text
    assert "FAIL (no baseline in this run)" in text and text.count("FAIL") == 4
    assert render([]) == "thresholds: none"


def test_to_json_carries_the_outcome():
    o = check("ttft_error_adjusted", "p(99) < 1s", WITH_FAILURE)
    j = to_json(o)
    assert j["metric"] == "ttft_error_adjusted" and j["threshold"] == "p(99) < 1s" and j["unit"] == "ms"
    assert j["limit"] == 1000.0 and math.isinf(j["measured"]) and j["passed"] is False
    assert to_json(check("errors", "count == 0"))["unit"] is None


# Well-formed thresholds, generated: the parse gives back the comparator and the normalized value.
_TIME_UNITS = {"": Decimal(1), "us": Decimal("0.001"), "ms": Decimal(1), "s": Decimal(1000)}
_CASES: list[tuple[str, str, dict[str, Decimal]]] = [
    ("ttft", "p(99)", _TIME_UNITS), ("itl", "avg", _TIME_UNITS), ("e2e_error_adjusted", "max", _TIME_UNITS),
    ("request_output_rate", "med", {"": Decimal(1), "tok/s": Decimal(1)}),
    ("tokens_per_chunk", "min", {"": Decimal(1)}),
    ("errors", "rate", {"": Decimal(1), "%": Decimal("0.01")}), ("errors", "count", {"": Decimal(1)}),
    ("goodput", "", {"": Decimal(1), "%": Decimal("0.01")}),
    ("request_throughput", "", {"": Decimal(1), "req/s": Decimal(1)}),
    ("output_throughput", "", {"": Decimal(1), "tok/s": Decimal(1)}),
    ("acceptance_length", "", {"": Decimal(1)}),
]
_numbers = st.decimals(min_value=0, max_value=10**7, places=3, allow_nan=False, allow_infinity=False)
_space = st.sampled_from(["", " ", "  "])


@st.composite
def _thresholds(draw: st.DrawFn) -> tuple[str, str, str, float]:
    metric, aggregation, units = draw(st.sampled_from(_CASES))
    comparator = draw(st.sampled_from(["<", "<=", ">", ">=", "==", "!="]))
    number = draw(_numbers)
    unit = draw(st.sampled_from(sorted(units)))
    s = [draw(_space) for _ in range(4)]
    text = f"{s[0]}{aggregation}{s[1]}{comparator}{s[2]}{number}{s[3] if unit else ''}{unit}"
    return metric, text, comparator, float(number * units[unit])


@settings(max_examples=150, deadline=None)
@given(_thresholds())
def test_generated_well_formed_thresholds_round_trip(case: tuple[str, str, str, float]):
    metric, text, comparator, value = case
    t = parse(metric, text)
    assert isinstance(t, Threshold) and not t.baseline
    assert (t.metric, t.text, t.comparator, t.value) == (metric, text, comparator, value)


@settings(max_examples=50, deadline=None)
@given(st.sampled_from(["*", "+", "-"]), _numbers, _space)
def test_generated_baseline_forms_round_trip(op: str, number: Decimal, space: str):
    t = parse("ttft", f"p(95){space}>={space}baseline{space}{op}{space}{number}")
    assert t.baseline and t.value is None and t.comparator == ">="
    assert (t.baseline_op, t.baseline_operand) == (op, float(number))


def test_a_threshold_on_a_reasoning_figure_reads_its_equal_in_a_level_without_reasoning():
    """ttfa is ttft, and itl_answer itl, where no request streamed reasoning (the summary keeps only
    the latter); the counts of a reasoning phase have no equal and are n/a."""
    assert "ttfa" not in CLEAN.metrics
    for name, same in (("ttfa", "ttft"), ("itl_answer", "itl")):
        got = check(name, "p(99) < 10s")
        assert got.passed and got.measured == CLEAN.metrics[same]["p99"], got
    assert check("reasoning_tokens", "p(50) < 5").reason.startswith("n/a")
