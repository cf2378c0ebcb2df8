"""Thresholds with abort_on_fail judged on a level's requests so far (`loadgate.analysis.so_far`):
each is judged only after its delay and once its figure holds the samples its rule asks
(`loadgate.core.aborting`), reads the figure as the summary defines it, and trips once."""

from __future__ import annotations

import math

from loadgate.analysis.so_far import SoFar, Watched
from loadgate.core.thresholds import parse
from loadgate.records import Record
from tests.recs import make_record

MS = 1_000_000


def ok(ttft_ms: float) -> Record:
    return make_record(start_ns=0, end_ns=int((ttft_ms + 5) * MS), chunk_ns=[int(ttft_ms * MS), int((ttft_ms + 5) * MS)],
                       chunk_tokens=[1, 1], completion_tokens=2)


def failed() -> Record:
    return make_record(status=500, error={"kind": "http_status", "detail": "HTTP 500"})


def test_a_quantile_is_judged_once_it_holds_ten_samples_above_it() -> None:
    so_far = SoFar([Watched(parse("ttft", "p(90) < 100ms"))])
    for _ in range(99):  # p(90) needs 10 / (1 - 0.9) = 100 samples
        so_far.add(ok(200.0))
    assert so_far.check(5.0) is None
    so_far.add(ok(200.0))
    trip = so_far.check(5.0)
    assert trip is not None and trip.outcome.measured == 200.0 and trip.outcome.limit == 100.0
    assert trip.requests == trip.samples == 100
    assert trip.words == ('threshold ttft "p(90) < 100ms" (abort_on_fail) failed 5.0 s into the level on the 100 '
                          "requests finished so far: 200 ms against 100 ms")
    assert so_far.check(6.0) is None  # it tripped once


def test_nothing_is_judged_before_the_delay() -> None:
    so_far = SoFar([Watched(parse("ttft", "p(50) < 100ms"), delay_s=10.0)])
    for _ in range(50):
        so_far.add(ok(300.0))
    assert so_far.check(9.99) is None
    trip = so_far.check(10.0)
    assert trip is not None and trip.after_s == 10.0 and trip.outcome.measured == 300.0


def test_a_passing_threshold_never_trips() -> None:
    so_far = SoFar([Watched(parse("ttft", "p(50) < 1s")), Watched(parse("errors", "rate < 50%"))])
    for _ in range(500):
        so_far.add(ok(20.0))
    assert so_far.check(60.0) is None


def test_failed_requests_count_in_an_error_adjusted_figure_as_infinity() -> None:
    plain = SoFar([Watched(parse("ttft", "p(50) < 1s"))])
    adjusted = SoFar([Watched(parse("ttft_error_adjusted", "p(50) < 1s"))])
    for so_far in (plain, adjusted):
        for _ in range(10):
            so_far.add(ok(5.0))
            so_far.add(failed())
    assert plain.check(1.0) is None  # 10 successful samples: under the 20 p(50) needs
    trip = adjusted.check(1.0)  # 20 samples, half of them +inf: the median is infinite
    assert trip is not None and trip.samples == 20 and trip.outcome.measured == math.inf


def test_errors_count_from_the_first_failure_and_rate_from_twenty_requests() -> None:
    count = SoFar([Watched(parse("errors", "count == 0"))])
    count.add(ok(5.0))
    assert count.check(0.1) is None
    count.add(failed())
    trip = count.check(0.1)
    assert trip is not None and trip.outcome.measured == 1.0 and trip.requests == 2

    rate = SoFar([Watched(parse("errors", "rate < 50%"))])
    for k in range(19):
        rate.add(failed() if k < 15 else ok(5.0))
    assert rate.check(1.0) is None  # 15 of 19 failed, but 20 requests are needed
    rate.add(ok(5.0))
    trip = rate.check(1.0)
    assert trip is not None and trip.outcome.measured == 15 / 20
    assert trip.words.endswith("on the 20 requests finished so far: 75.00% against 50.00%")


def test_an_errors_rate_is_judged_once_its_limit_allows_ten_failures() -> None:
    """`rate < r` is judged from 10 / r requests (the failure indicator's p(100 - r) rule), not 20:
    judged from 20, one early failure of a healthy server (0.3 % failing: its level's rate passes
    1 % but for about 1 run in 1,000) read 5 % against 1 % and aborted about 3 runs in 10 of 1,000
    requests judged after each one."""
    rate = SoFar([Watched(parse("errors", "rate < 1%"))])
    rate.add(failed())
    for _ in range(998):
        rate.add(ok(5.0))
    assert rate.check(10.0) is None  # 1 of 999: not judged before 1,000 requests
    rate.add(ok(5.0))
    assert rate.check(10.0) is None  # 1 of 1,000 passes
    broken = SoFar([Watched(parse("errors", "rate < 1%"))])
    for k in range(1000):
        broken.add(failed() if k % 2 else ok(5.0))
    trip = broken.check(10.0)
    assert trip is not None and trip.outcome.measured == 0.5 and trip.requests == 1000
    tenth = SoFar([Watched(parse("errors", "rate < 10%"))])
    for k in range(99):
        tenth.add(failed() if k < 20 else ok(5.0))
    assert tenth.check(1.0) is None  # 100 requests for 10 %
    tenth.add(ok(5.0))
    trip = tenth.check(1.0)
    assert trip is not None and trip.outcome.measured == 0.2
    zero = SoFar([Watched(parse("errors", "rate == 0"))])  # a first failure fails it whatever follows
    zero.add(failed())
    assert zero.check(0.1) is not None


def test_ttfa_reads_ttft_where_no_request_reasoned() -> None:
    so_far = SoFar([Watched(parse("ttfa", "p(50) < 100ms"))])
    for _ in range(20):
        so_far.add(ok(150.0))
    trip = so_far.check(1.0)
    assert trip is not None and trip.outcome.measured == 150.0


def test_an_unstreamed_level_has_no_chunk_figures_to_abort_on() -> None:
    so_far = SoFar([Watched(parse("ttft", "p(50) < 100ms"))], stream=False)
    for _ in range(50):
        so_far.add(ok(150.0))
    assert so_far.check(1.0) is None
