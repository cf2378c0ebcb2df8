"""Truth tests: what loadgate measured against what the simulator says it sent.

The simulator runs in a child process (its own event loop); loadgate runs here. Both stamp
`perf_counter_ns` (one system-wide monotonic clock), so the simulator's send times, taken through
the same metric definitions, are the ground truth for loadgate's receive-side figures.
"""

from __future__ import annotations

import math

import pytest

from loadgate.analysis.metrics import stats
from loadgate.config.simconfig import SimConfig, SpeculativeConfig
from loadgate.core.figures import figure
from loadgate.records import Record
from loadgate.sim.process import SimProcess
from tests.simtruth import profile_for, run, truth_records_like_loadgate

SPEC = SimConfig(seed=3, speculative=SpeculativeConfig(method="draft_model", k=4),
                 decode_step_us=3000, decode_us_per_seq=40, prefill_us_per_token=5)


def _close(measured: float, truth: float) -> bool:
    return abs(measured - truth) <= max(0.01 * abs(truth), 0.2)


def _bounded_samples(name: str, r: Record, early: list[int], late: list[int]) -> tuple[list[float], list[float]]:
    """The earliest and latest each sample of figure `name` can truly be, where chunk j truly
    arrived in [r.chunk_ns[j] - early[j], r.chunk_ns[j] + late[j]]."""
    c, n = r.chunk_ns, r.chunk_tokens
    if name == "ttft":
        t = (r.start_ns + c[0] - r.origin_ns) / 1e6
        return [t - early[0] / 1e6], [t + late[0] / 1e6]
    lo: list[float] = []
    hi: list[float] = []
    for j in range(1, len(c)):
        if n[j] > 0:
            lo += [(c[j] - early[j] - c[j - 1] - late[j - 1]) / 1e6 / n[j]] * n[j]
            hi += [(c[j] + late[j] - c[j - 1] + early[j - 1]) / 1e6 / n[j]] * n[j]
    return lo, hi


def _interval(name: str, records: list[Record], early: list[list[int]], late: list[list[int]]) -> tuple[dict, dict]:
    bounds = [_bounded_samples(name, r, e, x) for r, e, x in zip(records, early, late, strict=True)]
    return stats([x for b in bounds for x in b[0]]), stats([x for b in bounds for x in b[1]])


@pytest.mark.timing
@pytest.mark.parametrize("concurrency,requests", [(1, 30), (64, 256)])
def test_ttft_and_itl_percentiles_match_what_the_simulator_sent(tmp_path, concurrency, requests):
    with SimProcess(SPEC) as sim:
        run_dir, records, meta = run(profile_for(sim.url, tmp_path, requests=requests, concurrency=concurrency,
                                                 isl=64, osl=48))
        truth = sim.truth_records()
    measured = [r for r in records if not r.warmup]
    assert all(r.error is None for r in measured)
    assert max(max(r.chunk_tokens) for r in measured) > 1, "speculation must bundle tokens into chunks"
    tag = f"{run_dir.name}-L{concurrency}"
    sent = truth_records_like_loadgate(measured, truth, meta, tag)
    assert len(sent) == requests
    for r, t in zip(measured, sent, strict=True):
        assert r.chunk_tokens == t.chunk_tokens  # every chunk seen, with its exact token count
    # Where each chunk truly reached the client's socket, on both sides: loadgate states [stamp -
    # chunk_early_ns, stamp]; the simulator knows [before its write call, after it returned].
    begun = truth_records_like_loadgate(measured, truth, meta, tag, "write_begin_ns")
    ended = truth_records_like_loadgate(measured, truth, meta, tag, "write_end_ns")
    zeros = [[0] * len(r.chunk_ns) for r in measured]
    client_early = [r.chunk_early_ns or z for r, z in zip(measured, zeros, strict=True)]
    write_time = [[e - b for b, e in zip(rb.chunk_ns, re.chunk_ns, strict=True)]
                  for rb, re in zip(begun, ended, strict=True)]
    for name in ("ttft", "itl"):
        fn = figure(name).samples
        ms = stats([x for r in measured for x in fn(r)])
        ts = stats([x for r in sent for x in fn(r)])
        # A percentile is monotone in every sample, so the true one lies between the percentiles of
        # the samples' earliest and latest possible values, on each side: the two ranges must meet.
        c_lo, c_hi = _interval(name, measured, client_early, zeros)
        t_lo, t_hi = _interval(name, begun, zeros, write_time)
        for q in ("p50", "p99"):
            assert c_lo[q] <= ms[q] <= c_hi[q]
            assert t_lo[q] - 0.05 <= c_hi[q] and c_lo[q] <= t_hi[q] + 0.05, (
                f"{name} {q}: loadgate stated {c_lo[q]:.4f}-{c_hi[q]:.4f} ms, the simulator wrote it "
                f"{t_lo[q]:.4f}-{t_hi[q]:.4f} ms")
            if c_hi[q] - c_lo[q] <= 0.2 and t_hi[q] - t_lo[q] <= 0.2:  # both exact: the figure is the truth's
                assert _close(ms[q], ts[q]), f"{name} {q}: measured {ms[q]:.4f} ms, sent {ts[q]:.4f} ms"


def test_acceptance_length_equals_the_simulators_exactly(tmp_path):
    from loadgate.analysis.summary import build_summary

    with SimProcess(SPEC) as sim:
        run_dir, records, meta = run(profile_for(sim.url, tmp_path, requests=40, concurrency=8, osl=40, warmup=4))
        truth = sim.truth_records()
    s = build_summary(run_dir).levels["8"]
    measured = {f"{run_dir.name}-L8-{r.i}" for r in records if not r.warmup}
    # the simulator's own account: every token chunk after the first is one verify step
    steps = tokens = 0
    for t in truth:
        if t["request_id"] in measured:
            chunks = [c["n_tokens"] for c in t["chunks"] if c["kind"] == "tokens"]
            steps += len(chunks) - 1
            tokens += sum(chunks[1:])
    true_al = tokens / steps
    assert s.acceptance.per_request["acceptance_length"] == pytest.approx(true_al, rel=0, abs=1e-12)
    assert s.acceptance.counters["acceptance_length"] == pytest.approx(true_al, rel=0, abs=1e-12)
    assert s.contamination["clean"] and s.acceptance.reconciliation["agree"]


def test_every_injected_fault_is_counted_once_in_the_right_kind(tmp_path):
    from loadgate.config.simconfig import FaultConfig

    cfg = SimConfig(seed=11, decode_step_us=1000, decode_us_per_seq=10,
                    faults=FaultConfig(http_429=0.04, http_500=0.04, http_503=0.04, disconnect=0.05,
                                       malformed=0.05, error_event=0.05, stall=0.03, stall_s=0.2,
                                       slow_first_byte=0.03, slow_first_byte_s=0.1))
    with SimProcess(cfg) as sim:
        run_dir, records, meta = run(profile_for(sim.url, tmp_path, requests=300, concurrency=16, osl=24))
        truth = {t["request_id"]: t for t in sim.truth_records()}
    expect_kind = {"http_429": "http_status", "http_500": "http_status", "http_503": "http_status",
                   "disconnect": "disconnect", "malformed": "malformed", "error_event": "error_event"}
    seen: dict[str, int] = {}
    for r in records:
        t = truth[f"{run_dir.name}-L16-{r.i}"]
        kinds = [expect_kind[f] for f in t["faults"] if f in expect_kind]
        got = None if r.error is None else r.error.kind
        assert got == (kinds[0] if kinds else None), f"request {r.i}: faults {t['faults']}, recorded {r.error}"
        if got == "http_status":
            assert r.status == int(t["faults"][0].split("_")[1])
        for f in t["faults"]:
            seen[f] = seen.get(f, 0) + 1
        if "stall" in t["faults"] and got is None:
            assert max(b - a for a, b in zip(r.chunk_ns, r.chunk_ns[1:], strict=False)) >= 0.19e9
        if "slow_first_byte" in t["faults"] and got is None:
            assert r.headers_ns - r.start_ns >= 0.09e9 or r.chunk_ns[0] >= 0.09e9
    assert set(seen) >= set(expect_kind) | {"stall", "slow_first_byte"}, seen
    assert len(records) == 300  # the run completed: every request has its record
    assert not math.isnan(sum(r.end_ns for r in records))
