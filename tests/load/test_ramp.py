"""load.ramp in the plan and the profile: an open loop's ramp times follow the integrated rate curve
(exact, no timing), a closed loop's slots open on the curve, the measured requests are the same with
or without a ramp, and bad ramps are refused in one line."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np
import pytest

from loadgate.cli import main
from loadgate.config.profile import Distribution, Load, Profile, Ramp, Workload
from loadgate.core import ramps
from loadgate.load.levels import at_level, levels
from loadgate.load.plan import RAMP_BLOCK, build_plan
from loadgate.records import read_records
from tests.recs import make_record

POOL = list(range(100, 400))


def _profile(ramp: Ramp | None, *, rate: float | tuple[float, ...] | None = 10.0, concurrency: int | None = None,
             arrival: str = "constant", requests: int = 40) -> Profile:
    return Profile(workload=Workload(requests=requests, input_len=Distribution(dist="fixed", value=4),
                                     output_len=Distribution(dist="fixed", value=2)),
                   load=Load(rate=rate, concurrency=concurrency, arrival=arrival, warmup_requests=3,
                             ramp=ramp))


def test_a_linear_open_loop_ramp_sends_at_the_inverse_of_its_integrated_rate() -> None:
    # rate 2 -> 10 over 4 s: Λ(t) = 2t + t², so arrival k (constant process: Λ = k) is at sqrt(1 + k) - 1 s,
    # k = 3, 8, 15 at 1, 2, 3 s, and Λ(4) = 24 arrivals before the ramp's end (the 24th would be at 4 s)
    plan = build_plan(_profile(Ramp(duration_s=4.0, start=2.0)), POOL)
    assert plan.ramp_offsets == [round((math.sqrt(1 + k) - 1) * 1e9) for k in range(24)]
    assert [plan.ramp_offsets[k] for k in (0, 3, 8, 15)] == [0, 1_000_000_000, 2_000_000_000, 3_000_000_000]
    reqs = list(plan.ramp_requests(lambda k: True))
    assert [r.intended_offset_ns for r in reqs] == plan.ramp_offsets
    assert [r.i for r in reqs] == list(range(len(plan), len(plan) + 24)) and len(plan) == 43
    assert all(r.ramp and not r.warmup and len(r.prompt_ids or ()) == 4 and r.output_len == 2 for r in reqs)


def test_an_exponential_open_loop_ramp_follows_its_integrated_rate_and_starts_at_a_tenth_by_default() -> None:
    # rate 1 -> 10 over 3 s (start: a tenth of the rate): Λ(t) = (e^{bt} - 1) / b, b = ln 10 / 3
    plan = build_plan(_profile(Ramp(duration_s=3.0, shape="exponential")), POOL)
    b = math.log(10) / 3
    expected = [round(math.log1p(b * k) / b * 1e9) for k in range(100) if math.log1p(b * k) / b < 3]
    assert plan.ramp_offsets == expected
    assert len(expected) == math.ceil(ramps.expected_arrivals("exponential", 1.0, 10.0, 3.0)) == 12  # 9 / ln 10 x 3


def test_a_poisson_ramp_is_its_unit_process_rescaled_and_each_level_of_a_sweep_ramps_to_its_own_rate() -> None:
    sweep = _profile(Ramp(duration_s=2.0), rate=(5.0, 20.0), arrival="poisson")
    plans = [build_plan(at_level(sweep, loop), POOL) for loop in levels(sweep)]
    for plan, rate in zip(plans, (5.0, 20.0), strict=True):
        t = np.array(plan.ramp_offsets) / 1e9
        assert t[0] == 0 and np.all(np.diff(t) >= 0) and t[-1] < 2.0
        start, a = rate / 10, (rate - rate / 10) / 2.0
        cum = start * t + a * t * t / 2  # Λ(t): the unit process's running sums, drawn with the plan's seed
        gaps = np.random.default_rng([0, 2]).exponential(1.0, size=len(t))
        gaps[0] = 0
        assert np.allclose(cum, np.cumsum(gaps), atol=1e-6)
    assert len(plans[1].ramp_offsets or ()) > 2 * len(plans[0].ramp_offsets or ())  # 22 and 5.5 expected


def test_a_ramp_leaves_the_warmup_and_measured_requests_as_they_were() -> None:
    for kw in ({"rate": 10.0}, {"rate": None, "concurrency": 4}):
        without = list(build_plan(_profile(None, **kw), POOL))
        with_ramp = build_plan(_profile(Ramp(duration_s=1.0), **kw), POOL)
        assert list(with_ramp) == without
        ramp_prompts = {r.prompt_ids for r in itertools.islice(with_ramp.ramp_requests(lambda k: True), 20)}
        assert len(ramp_prompts) >= 6 and not ramp_prompts & {r.prompt_ids for r in without}  # its own draws


def test_a_closed_loop_ramp_has_no_planned_end_and_request_k_is_the_same_however_it_is_asked_for() -> None:
    plan = build_plan(_profile(Ramp(duration_s=1.0), rate=None, concurrency=4), POOL)
    assert plan.ramp_offsets is None
    odd = plan.ramp_requests(lambda k: k % 2 == 1)  # worker 1 of 2
    firsts = [next(odd) for _ in range(RAMP_BLOCK + 1)]  # into the second block of draws
    assert [r.i for r in firsts[:3]] == [len(plan) + 1, len(plan) + 3, len(plan) + 5]
    again = build_plan(_profile(Ramp(duration_s=1.0), rate=None, concurrency=4), POOL)
    assert [again.ramp_request(r.i - len(plan)) for r in reversed(firsts)] == firsts[::-1]
    assert all(r.intended_offset_ns is None for r in firsts)


def test_a_closed_loop_ramp_opens_slot_s_when_the_curve_reaches_s_plus_one() -> None:
    assert ramps.slot_delays_s("linear", 1, 8, 7.0) == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]
    assert ramps.slot_delays_s("exponential", 1, 8, 3.0) == pytest.approx([math.log2(s + 1) for s in range(8)])
    assert ramps.slot_delays_s("linear", 3, 5, 2.0) == [0.0, 0.0, 0.0, 1.0, 2.0]
    assert ramps.slot_delays_s("linear", 4, 4, 2.0) == [0.0] * 4  # a start at the level holds it
    assert ramps.start_of(None, 16, closed=True) == 1 and ramps.start_of(None, 30.0, closed=False) == 3.0
    assert ramps.start_of(50.0, 30.0, closed=False) == 30.0
    assert ramps.load_at("exponential", 1, 16, 2.0, 1.0) == pytest.approx(4.0)  # sqrt(1 x 16) halfway


@pytest.mark.parametrize(("load", "reason"), [
    ("{concurrency: 4, ramp: {duration_s: 2, shape: cubic}}",
     "load.ramp.shape: expected one of 'linear', 'exponential', got 'cubic'"),
    ("{concurrency: 4, ramp: {duration_s: 0}}", "load.ramp.duration_s: expected a number > 0, got 0"),
    ("{concurrency: 4, ramp: {duration_s: -3}}", "load.ramp.duration_s: expected a number > 0, got -3"),
    ("{concurrency: 4, ramp: {shape: linear}}", "load.ramp: missing required key 'duration_s'"),
    ("{concurrency: 4, duration_s: 5, ramp: {duration_s: 5}}",
     "load.ramp.duration_s: the ramp (5 s) must be shorter than the measured phase (load.duration_s: 5 s)"),
    ("{concurrency: 4, ramp: {duration_s: 2, start: 1.5}}",
     "load.ramp.start: a closed loop's ramp starts at a whole number of requests in flight, got 1.5"),
    ("{rate: [5, 10], ramp: {duration_s: 4}}",  # 4 s x (1 + 10) / 2 = 22 requests at the 10/s level
     "load.ramp.duration_s: a ramp over 4 s (linear) to 10 requests/s sends about 22 requests, not fewer than the "
     "measured phase's workload.requests (20)"),
    ("{search: {over: rate, lo: 1, hi: 40, resolution: 0.3}, ramp: {duration_s: 2, shape: exponential}}",
     "load.ramp.duration_s: a ramp over 2 s (exponential) to 40 requests/s sends about 31 requests"),  # at hi: 72 / ln 10
    ("{schedule: trace, ramp: {duration_s: 1}}",
     "load.ramp: load.schedule: trace sends each request at its trace timestamp: no ramp"),
])
def test_a_bad_ramp_is_refused_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], load: str,
                                           reason: str) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(f"workload: {{requests: 20}}\nthresholds: {{ttft: ['p(50) < 1s']}}\nload: {load}\n")
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and str(path) in err and reason in err, err


@pytest.mark.parametrize(("requests", "code"), [(25, 0), (24, 2)])
def test_an_open_loop_ramp_is_refused_from_as_many_expected_arrivals_as_measured_requests(
        tmp_path: Path, requests: int, code: int) -> None:
    path = tmp_path / "p.yaml"  # from 2 to 10 requests/s over 4 s: 24 arrivals expected
    path.write_text(f"workload: {{requests: {requests}}}\nload: {{rate: 10, duration_s: 5, ramp: {{duration_s: 4, "
                    "start: 2}}\n")
    assert main(["validate", str(path)]) == code


def test_a_v9_ramp_record_is_left_out_of_what_read_records_yields_and_a_wrong_type_is_refused(tmp_path: Path) -> None:
    from loadgate.errors import UsageError

    path = tmp_path / "records.jsonl"
    path.write_bytes(b"".join(make_record(i=i, ramp=i >= 2, warmup=i == 0).to_json() for i in range(4)))
    assert [r.i for r in read_records(path)] == [1]
    every = list(read_records(path, include_warmup=True))
    assert [(r.i, r.warmup, r.ramp, r.excluded) for r in every] == [
        (0, True, False, True), (1, False, False, False), (2, False, True, True), (3, False, True, True)]
    path.write_bytes(make_record(i=2, ramp=True).to_json().replace(b'"ramp":true', b'"ramp":"yes"'))
    with pytest.raises(UsageError, match="wrong type for ramp"):
        list(read_records(path))


def test_the_exchange_log_keeps_the_ramp_flag_into_the_record(tmp_path: Path) -> None:
    from loadgate.engine.adapters import adapter_for
    from loadgate.load.exchanges import Exchange, ExchangeLog
    from loadgate.load.exchanges import read as read_log
    from loadgate.load.recorder import exchange_record
    from loadgate.load.target import Raw, decode

    log = ExchangeLog(tmp_path / "x.lgx", {"api": "openai-completions"})
    for i, flag in ((7, True), (8, False)):
        log.add(Exchange(i, False, 4, 2, 0, 8, 0, None, Raw(start_ns=1, end_ns=2, status=200), ramp=flag))
    log.close()
    contents = read_log(tmp_path / "x.lgx")
    assert contents is not None
    adapter = adapter_for("openai-completions")
    recs = [exchange_record(x, decode(adapter, True, x.raw, 2**20), 0) for x in contents.exchanges]
    assert [(r.i, r.ramp) for r in recs] == [(7, True), (8, False)]
