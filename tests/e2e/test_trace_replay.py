"""Timed traces against one simulator child with its prefix cache on: requests sent at their
timestamps (scaled, windowed, sorted), Mooncake's hash ids made into shared token blocks whose
sharing the simulator's hit counter sees, two runs of one trace both starting cold, and the bad
inputs refused in one line before anything is sent."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import loadgate
from loadgate.analysis.summary import SUMMARY_VERSION
from loadgate.cli import main
from loadgate.config.profile import Dataset, Load, Output, Profile, Target, Workload
from loadgate.config.simconfig import SimConfig
from loadgate.jsonutil import load_json
from loadgate.load.plan import build_plan
from loadgate.records import read_records
from loadgate.sim.process import SimProcess
from tests.profiles import LAX_BUDGETS

BLOCK = 64  # the trace's block (its hash ids' tokens)


@pytest.fixture(scope="module")
def sim() -> Any:
    # cache blocks of 16 tokens, room for far more than these runs' blocks (no eviction)
    with SimProcess(SimConfig(decode_step_us=200.0, prefill_us_per_token=0.2, prefix_cache_block=16),
                    startup_timeout=60) as s:
        yield s


def mooncake(path: Path, n: int = 48, rate: float = 40.0, seed: int = 3) -> Path:
    """A Mooncake-style trace: three groups of shared leading blocks (1, 2 and 3 blocks), then each
    request's own two blocks, the last one partial; Poisson arrivals."""
    rnd = random.Random(seed)
    groups, t, lines = [[1], [2, 3], [4, 5, 6]], 0.0, []
    for i in range(n):
        t += rnd.expovariate(rate) * 1000
        g = groups[i % 3]
        lines.append({"timestamp": round(t, 3), "input_length": (len(g) + 2) * BLOCK - 9, "output_length": 8,
                      "hash_ids": g + [1000 + 2 * i, 1001 + 2 * i]})
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def profile(tmp: Path, trace: Path, url: str, **load: Any) -> Profile:
    return Profile(name="trace", seed=5, target=Target(endpoint=url, api="openai-completions"),
                   workload=Workload(dataset=Dataset(path=str(trace), block_size=BLOCK)),
                   load=Load(schedule="trace", **load), health=LAX_BUDGETS,
                   output=Output(dir=str(tmp / "out")), path=str(tmp / "p.yaml"))


def test_the_traces_own_sharing_is_the_servers_hit_rate_and_a_second_run_starts_cold(sim, tmp_path):
    trace = mooncake(tmp_path / "t.jsonl")
    rates = []
    for _ in range(2):  # the same trace twice against one cache: fresh blocks each run
        result = loadgate.run(profile(tmp_path, trace, sim.url), unverified=True)
        assert result.exit_code in (11, 30), result
        summary = load_json(result.run_dir / "summary.json")
        assert summary["summary_version"] == SUMMARY_VERSION and summary["load"] == "trace"
        sharing = summary["trace"]["sharing"]
        # groups of 1-3 leading blocks, each met 16 times: all but the first of each group share them
        assert sharing["shared_tokens"] == 15 * BLOCK * (1 + 2 + 3)
        hit = summary["levels"]["1.0"]["prefix_cache"]["hit_rate"]
        assert abs(hit - sharing["ratio"]) <= 0.02, (hit, sharing)
        rates.append(hit)
    assert abs(rates[1] - rates[0]) <= 0.02  # the second run met none of the first run's blocks
    out = (result.run_dir / "summary.json").read_text()
    assert '"out_of_order": 0' in out


def test_requests_go_at_their_timestamps_scaled_windowed_and_sorted(sim, tmp_path, capsys):
    lines = [{"timestamp": ms, "input_len": 16, "output_len": 4} for ms in (0, 400, 200, 600, 800, 1000, 1200)]
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps(x) + "\n" for x in lines))
    p = profile(tmp_path, trace, sim.url, trace_speed=2.0, trace_start_s=0.2, trace_length_s=0.8)
    sim.reset_truth()
    result = loadgate.run(p, unverified=True)
    recs = sorted(read_records(result.run_dir / "records.jsonl"), key=lambda r: r.i)
    # the window [0.2, 1.0) s of trace time holds 200, 400, 600, 800 ms; at speed 2, 100 ms apart
    assert [r.intended_ns - recs[0].intended_ns for r in recs] == [0, 100_000_000, 200_000_000, 300_000_000]
    truth = {t["request_id"]: t["arrival_ns"] for t in sim.truth_records()}
    meta = load_json(result.run_dir / "meta.json")
    arrivals = [truth[f"{result.run_dir.name}-L{r.level}-{r.i}"] - meta["t0_ns"] for r in recs]
    gaps = np.diff(arrivals) / 1e6
    assert all(abs(g - 100.0) < 25.0 for g in gaps), gaps  # sent at the scaled times (loop timers' slack)
    assert all(r.start_ns >= r.intended_ns for r in recs)  # never before its time; latency from it
    trace_meta = load_json(result.run_dir / "summary.json")["trace"]
    assert trace_meta["requests"] == 4 and trace_meta["out_of_order"] == 1 and trace_meta["sharing"] is None
    capsys.readouterr()
    assert main(["report", str(result.run_dir)]) in (11, 30)
    out = capsys.readouterr().out
    assert "trace ×2.0: 4 requests" in out
    assert ("timed trace: 4 requests over 0.3 s (mean 10.0 req/s), latency from each line's timestamp; "
            "1 of its 7 lines were out of time order (sent in time order)") in out


def test_equal_hash_ids_are_equal_blocks_and_a_new_salt_draws_new_ones(tmp_path):
    lines = [{"timestamp": 0, "input_length": 3 * BLOCK, "output_length": 4, "hash_ids": [7, 8, 9]},
             {"timestamp": 5, "input_length": 2 * BLOCK + 10, "output_length": 4, "hash_ids": [7, 8, 10]},
             {"timestamp": 9, "input_length": BLOCK, "output_length": 4, "hash_ids": [11]}]
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps(x) + "\n" for x in lines))
    pool = list(range(100, 5100))

    def prompts(salt: int) -> list[tuple[int, ...]]:
        p = profile(tmp_path, trace, "http://127.0.0.1:9")
        p = Profile(**{**p.__dict__, "workload": Workload(dataset=p.workload.dataset, prompt_salt=salt)})
        plan = build_plan(p, pool)
        return [r.prompt_ids for r in (plan[i] for i in plan.measured_requests())]  # type: ignore[misc]

    a, b, c = prompts(1)
    assert len(a) == 3 * BLOCK and len(b) == 2 * BLOCK + 10 and len(c) == BLOCK
    assert a[:2 * BLOCK] == b[:2 * BLOCK]  # ids 7, 8: the same tokens
    assert a[2 * BLOCK:2 * BLOCK + 10] != b[2 * BLOCK:]  # 9 and 10 differ
    assert c != a[:BLOCK]
    again = prompts(2)
    assert again[0][:BLOCK] != a[:BLOCK]  # another run's salt: other blocks, a cold cache


@pytest.mark.parametrize("line, load, where, words", [
    ({"input_len": 8, "output_len": 4}, "schedule: trace", "t.jsonl:2", "no timestamp"),
    ({"timestamp": 3, "input_length": 100, "output_length": 4, "hash_ids": [1, 2, 3]}, "schedule: trace",
     "t.jsonl:2", "hash_ids: 3 blocks of 64 tokens need more than input_length 100 allows (2 at most)"),
    ({"timestamp": 3, "input_len": 8, "output_len": 4}, "schedule: trace\n  trace_speed: 0", "load.trace_speed",
     "trace_speed"),
    ({"timestamp": 3, "input_len": 8, "output_len": 4}, "schedule: trace\n  concurrency: 4", "load.concurrency",
     "sends each request at its trace timestamp"),
    ({"timestamp": 3, "input_len": 8, "output_len": 4}, "schedule: trace\n  rate: 5", "load.rate",
     "sends each request at its trace timestamp"),
    ({"timestamp": 3, "input_len": 8, "output_len": 4}, "schedule: trace\n  trace_start_s: 5", "t.jsonl",
     "no request in the window from 5 s of trace time (the trace spans 0.003 s)"),
])
def test_bad_trace_input_is_one_line_and_nothing_is_sent(tmp_path, capsys, line, load, where, words):
    (tmp_path / "t.jsonl").write_text(json.dumps({"timestamp": 0, "input_len": 8, "output_len": 4}) + "\n"
                                      + json.dumps(line) + "\n")
    (tmp_path / "p.yaml").write_text(
        "target:\n  endpoint: http://127.0.0.1:9\nworkload:\n  dataset:\n    path: t.jsonl\n    block_size: 64\n"
        f"load:\n  {load}\n")
    assert main(["validate", str(tmp_path / "p.yaml")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and where in err and words in err, err
    assert "Traceback" not in err


def test_validate_says_what_a_timed_trace_will_replay(tmp_path, capsys):
    trace = mooncake(tmp_path / "t.jsonl", n=12)
    (tmp_path / "p.yaml").write_text(f"target:\n  endpoint: http://127.0.0.1:9\nworkload:\n  dataset:\n    path: {trace}\n"
                                     f"    block_size: {BLOCK}\nload:\n  schedule: trace\n  trace_speed: 2\n")
    assert main(["validate", str(tmp_path / "p.yaml")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1].startswith("timed trace: 12 requests over ") and "latency from each line's timestamp" in out[1]
    # 12 requests, 4 of each group of 1-3 shared leading blocks: 3 of each group find them
    assert f"{3 * BLOCK * (1 + 2 + 3) / sum((len(g) + 2) * BLOCK - 9 for g in [[1], [2, 3], [4, 5, 6]] * 4):.1%}" \
        in out[1], out[1]


def _timed(tmp: Path, stamps: list[Any], start: float = 0.0, length: float | None = None) -> Any:
    from loadgate.load.workload.timing import Window
    from loadgate.load.workload.trace import TraceRequests

    path = tmp / "w.jsonl"
    path.write_text("".join(json.dumps({"timestamp": ms, "input_len": 4, "output_len": 2}) + "\n" for ms in stamps))
    t = TraceRequests(path, None, 0, np.arange(1, 50))
    t.timed(Window(start, length))
    return t


@pytest.mark.parametrize("stamps, start, length, kept, offsets_ms", [
    ([0, 100, 200, 300], 0.1, 0.2, [1, 2], [0, 100]),  # [0.1, 0.3): 300 ms is outside, in float seconds too
    ([1000.1, 1200.1, 1400.1], 0.2, None, [1, 2], [0, 200]),  # 200 ms after the earliest is on the edge: in
    ([0, 500, 800], 0.2, None, [1, 2], [300, 600]),  # the phase counts from the window's start
])
def test_a_window_is_cut_in_trace_milliseconds(tmp_path, stamps, start, length, kept, offsets_ms):
    t = _timed(tmp_path, stamps, start, length)
    assert t.order.tolist() == kept
    assert [round(o / 1e6, 6) for o in t.offsets_ns] == offsets_ms


def test_timestamps_are_read_only_for_a_timed_replay(tmp_path):
    from loadgate.errors import UsageError

    path = tmp_path / "w.jsonl"
    path.write_text(json.dumps({"timestamp": "2024-01-01T00:00:00", "input_len": 4, "output_len": 2}) + "\n")
    from loadgate.load.workload.timing import Window
    from loadgate.load.workload.trace import TraceRequests

    t = TraceRequests(path, 3, 0, np.arange(1, 50))  # sent in file order: the text is not read
    assert len(t) == 3 and t.get(2)["output_len"] == 2
    with pytest.raises(UsageError, match=r"w.jsonl:1: timestamp: expected a number of milliseconds >= 0, "
                                         r"got '2024-01-01T00:00:00'"):
        t.timed(Window())


def refused(tmp: Path, capsys: Any, line: dict[str, Any], workload: str, load: str) -> str:
    """`validate`'s one line (exit 2) for a trace of `line` and the profile's sections as given."""
    (tmp / "t.jsonl").write_text(json.dumps(line) + "\n")
    (tmp / "p.yaml").write_text(f"target:\n  endpoint: http://127.0.0.1:9\nworkload:\n{workload}load:\n{load}")
    assert main(["validate", str(tmp / "p.yaml")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    return err


def test_a_mooncake_lines_own_key_is_named(tmp_path, capsys):
    err = refused(tmp_path, capsys, {"timestamp": 0, "input_length": 10.5, "output_length": 4, "hash_ids": [1]},
                  "  dataset:\n    path: t.jsonl\n", "  schedule: trace\n")
    assert "t.jsonl:1: input_length: expected an integer >= 1, got 10.5" in err


def test_duration_s_is_refused_with_a_timed_trace(tmp_path, capsys):
    err = refused(tmp_path, capsys, {"timestamp": 0, "input_len": 4, "output_len": 2},
                  "  dataset:\n    path: t.jsonl\n", "  schedule: trace\n  duration_s: 30\n")
    assert "load.duration_s" in err and "load.trace_length_s" in err


def test_two_workers_replay_every_request_of_the_window_at_its_time(sim, tmp_path):
    trace = mooncake(tmp_path / "t.jsonl", n=16)
    p = profile(tmp_path, trace, sim.url, workers=2)
    result = loadgate.run(p, unverified=True)
    recs = sorted(read_records(result.run_dir / "records.jsonl"), key=lambda r: r.i)
    stamps = [json.loads(line)["timestamp"] for line in trace.read_text().splitlines()]
    want = [round((s - stamps[0]) * 1e6) for s in stamps]
    assert len(recs) == 16 and all(r.succeeded for r in recs)
    assert [r.intended_ns - recs[0].intended_ns for r in recs] == want
    assert all(r.start_ns >= r.intended_ns for r in recs)


def test_an_unfinished_run_names_the_requests_it_planned():
    from loadgate.verdict import _planned

    assert _planned({"profile": {"workload": {"requests": None}}, "levels": [1, 2]}) == 200  # unset: 100 a level
    assert _planned({"profile": {"workload": {"requests": 30}}, "levels": [4]}) == 30
    assert _planned({"profile": {"workload": {"requests": None}}, "levels": [1.0], "trace": {"requests": 77}}) == 77


def test_a_jsonl_dataset_with_timestamps_is_replayed_at_them(sim, tmp_path, capsys):
    """Any JSONL kind may carry a timestamp: prompt rows here, sent in time order at their times."""
    rows = [{"timestamp": ms, "prompt": f"w{k} " * 6, "completion": "w " * 3} for k, ms in
            enumerate((300, 0, 100, 200, 900))]
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    p = Profile(name="timed", seed=5, target=Target(endpoint=sim.url, api="openai-completions"),
                workload=Workload(dataset=Dataset(path=str(path))), load=Load(schedule="trace", trace_length_s=0.5),
                health=LAX_BUDGETS, output=Output(dir=str(tmp_path / "out")), path=str(tmp_path / "p.yaml"))
    result = loadgate.run(p, unverified=True)
    recs = sorted(read_records(result.run_dir / "records.jsonl"), key=lambda r: r.i)
    assert [r.intended_ns - recs[0].intended_ns for r in recs] == [0, 100 * MS, 200 * MS, 300 * MS]  # 900 is out
    trace = load_json(result.run_dir / "summary.json")["trace"]
    assert trace["requests"] == 4 and trace["out_of_order"] == 3 and trace["lines"] == 5
    (tmp_path / "bad.jsonl").write_text(json.dumps({"prompt": "hi"}) + "\n")
    (tmp_path / "p.yaml").write_text("target:\n  endpoint: http://127.0.0.1:9\nworkload:\n  dataset:\n"
                                     "    path: bad.jsonl\nload:\n  schedule: trace\n")
    assert main(["validate", str(tmp_path / "p.yaml")]) == 2
    assert "bad.jsonl: line 1: no timestamp" in capsys.readouterr().err


MS = 1_000_000


def test_conversations_are_refused_with_a_timed_schedule(tmp_path, capsys):
    err = refused(tmp_path, capsys, {"timestamp": 0, "input_len": 4, "output_len": 2}, "  sessions:\n    turns: 3\n",
                  "  schedule: trace\n")
    assert "load.schedule" in err and "conversations send each turn" in err
