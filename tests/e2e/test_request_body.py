"""The request body under the profile's control, against one simulator child whose truth log says
what it was sent: `load.request` (sampling, a per-request seed, natural stops) and
`target.extra_body` in every measured request, `${NAME}` read from the environment and written
nowhere; lengths the model chose reported, not judged off the plan; a reasoning phase timed and
counted; a run without streaming measured end to end."""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

import loadgate
from loadgate.analysis.summary import SUMMARY_VERSION
from loadgate.cli import main
from loadgate.config.profile import (
    Distribution,
    Load,
    Output,
    Profile,
    RequestSettings,
    Slo,
    Target,
    Workload,
)
from loadgate.config.simconfig import SimConfig
from loadgate.errors import LoadgateError
from loadgate.jsonutil import load_json
from loadgate.load.target import request_seed
from loadgate.records import read_records
from loadgate.sim.process import SimProcess
from tests.profiles import LAX_BUDGETS

SECRET = "s3cr3t-extra-body-value"
REASONING = 6  # tokens of every chat reply's reasoning phase (the simulator's knob)


@pytest.fixture(scope="module")
def sim() -> Any:
    with SimProcess(SimConfig(decode_step_us=300.0, prefill_us_per_token=0.5, reasoning_tokens=REASONING),
                    startup_timeout=60) as s:
        yield s


def profile(url: str, tmp: Path, *, api: str = "openai-completions", requests: int = 24, out: int = 40,
            request: RequestSettings | None = None, extra: dict[str, Any] | None = None, stream: bool = True,
            warmup: int = 0) -> Profile:
    return Profile(name="body", seed=11, target=Target(endpoint=url, api=api, extra_body=extra or {}),
                   workload=Workload(requests=requests, input_len=Distribution(dist="fixed", value=48),
                                     output_len=Distribution(dist="fixed", value=out)),
                   load=Load(concurrency=4, request=request or RequestSettings(), stream=stream, warmup_requests=warmup),
                   health=LAX_BUDGETS, output=Output(dir=str(tmp / "out")), path=str(tmp / "p.yaml"))


def run(sim: Any, p: Profile) -> tuple[Any, list[Any], dict[str, Any]]:
    """(the run's result, its measured records, the simulator's truth by request id)."""
    sim.reset_truth()
    result = loadgate.run(p, unverified=True)
    recs = list(read_records(result.run_dir / "records.jsonl"))
    return result, recs, {t["request_id"]: t for t in sim.truth_records()}


def truth_of(result: Any, r: Any, truth: dict[str, Any]) -> dict[str, Any]:
    return truth[f"{result.run_dir.name}-L{r.level}-{r.i}"]


def test_sampling_a_seed_per_request_stops_and_extra_keys_reach_every_request_and_no_file_holds_the_secret(
        sim, tmp_path, monkeypatch):
    monkeypatch.setenv("LG_BODY_SECRET", SECRET)
    req = RequestSettings(temperature=0.8, top_p=0.9, top_k=50, min_p=0.05, seed="per_request", ignore_eos=False,
                          stop=("x",))
    extra = {"repetition_penalty": 1.1, "chat_template_kwargs": {"enable_thinking": False},
             "user_tag": "${LG_BODY_SECRET}", "stream_options": {"extra": 1}}
    result, recs, truth = run(sim, profile(sim.url, tmp_path, request=req, extra=extra))
    # not INVALID: outputs shorter than planned are the model's choice, not counts off the plan
    assert result.exit_code == 11, result
    seeds = set()
    for r in recs:
        sent = truth_of(result, r, truth)["params"]
        assert (sent["temperature"], sent["top_p"], sent["top_k"], sent["min_p"]) == (0.8, 0.9, 50, 0.05)
        assert sent["ignore_eos"] is False and sent["stop"] == ["x"]
        assert sent["repetition_penalty"] == 1.1 and sent["chat_template_kwargs"] == {"enable_thinking": False}
        assert sent["user_tag"] == SECRET  # the server got the value...
        # ...merged into loadgate's own mapping, which keeps its keys
        assert sent["stream_options"] == {"include_usage": True, "continuous_usage_stats": True, "extra": 1}
        assert sent["seed"] == request_seed(11, r.i)
        seeds.add(sent["seed"])
    assert len(seeds) == len(recs)
    lengths = Counter(r.output_tokens for r in recs)
    reasons = Counter(r.finish_reason for r in recs)
    assert len(lengths) >= 2 and reasons["stop"] >= 1, (lengths, reasons)
    assert all(r.output_tokens <= 40 for r in recs)
    tc = load_json(result.run_dir / "summary.json")["levels"]["4"]["token_counts"]
    assert tc["natural_lengths"] is True and tc["ok"] is True and tc["completion_mismatches"] == 0
    assert tc["finish_reasons"] == dict(sorted(Counter(r.finish_reason or "(none)" for r in recs).items()))
    assert tc["output_lengths"]["distinct"] == len(lengths) and tc["output_lengths"]["max"] <= 40
    summary = load_json(result.run_dir / "summary.json")
    assert summary["summary_version"] == SUMMARY_VERSION
    assert summary["request"]["temperature"] == 0.8 and summary["request"]["stop"] == ["x"]
    assert summary["request"]["extra_body_keys"] == sorted(extra)
    verdict = load_json(result.run_dir / "verdict.json")
    assert verdict["v"] == 2 and "sampled (temperature 0.8)" in verdict["caveats"][0]
    for f in result.run_dir.rglob("*"):
        if f.is_file():
            assert SECRET.encode() not in f.read_bytes(), f
    assert "${LG_BODY_SECRET}" in (result.run_dir / "meta.json").read_text()  # the profile as written


def test_greedy_ignore_eos_requests_keep_the_plan_check_and_send_no_seed(sim, tmp_path):
    result, recs, truth = run(sim, profile(sim.url, tmp_path, requests=8))
    assert result.exit_code == 11
    for r in recs:
        sent = truth_of(result, r, truth)["params"]
        assert "seed" not in sent and sent["temperature"] == 0.0 and sent["ignore_eos"] is True
        assert r.output_tokens == 40
    tc = load_json(result.run_dir / "summary.json")["levels"]["4"]["token_counts"]
    assert tc["natural_lengths"] is False and tc["output_lengths"] is None
    assert load_json(result.run_dir / "verdict.json")["caveats"] == []


@pytest.mark.parametrize("key", ["model", "prompt", "messages", "stream", "max_tokens"])
def test_a_key_loadgate_sets_is_refused_in_one_line_unless_overridden(tmp_path, capsys, key):
    p = tmp_path / "p.yaml"
    p.write_text(f"target:\n  endpoint: http://127.0.0.1:9\n  extra_body:\n    {key}: 1\n")
    assert main(["validate", str(p)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"target.extra_body.{key}" in err and "extra_body_override" in err
    assert str(p) in err
    p.write_text(f"target:\n  endpoint: http://127.0.0.1:9\n  extra_body_override: true\n  extra_body:\n    {key}: 1\n")
    assert main(["validate", str(p)]) == 0


def test_a_sampling_key_in_extra_body_points_at_load_request(tmp_path, capsys):
    p = tmp_path / "p.yaml"
    p.write_text("target:\n  endpoint: http://127.0.0.1:9\n  extra_body_override: true\n  extra_body:\n    temperature: 1\n")
    assert main(["validate", str(p)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "load.request.temperature" in err


def test_an_unset_variable_in_extra_body_is_one_line_naming_the_key(sim, tmp_path, monkeypatch):
    monkeypatch.delenv("LG_NOT_SET_ANYWHERE", raising=False)
    p = profile(sim.url, tmp_path, requests=2, extra={"auth": {"token": "${LG_NOT_SET_ANYWHERE}"}})
    with pytest.raises(LoadgateError) as e:
        loadgate.run(p, unverified=True)
    assert e.value.exit_code == 2
    assert "target.extra_body.auth.token: ${LG_NOT_SET_ANYWHERE} is not set" in e.value.message


def test_a_reasoning_phase_is_counted_exactly_and_ttfa_follows_it(sim, tmp_path):
    result, recs, truth = run(sim, profile(sim.url, tmp_path, api="openai-chat", requests=12, out=30))
    assert result.exit_code == 11, result
    for r in recs:
        t = truth_of(result, r, truth)
        assert r.reasoning_tokens == t["reasoning_tokens"] == REASONING
        assert sum(r.chunk_tokens) == t["completion_tokens"] == 30
        assert r.answer_chunk is not None and sum(r.chunk_tokens[:r.answer_chunk]) == REASONING
    m = load_json(result.run_dir / "summary.json")["levels"]["4"]["metrics"]
    assert m["reasoning_tokens"]["count"] == 12 and m["reasoning_tokens"]["min"] == m["reasoning_tokens"]["max"] == 6
    assert m["answer_tokens"]["min"] == m["answer_tokens"]["max"] == 24
    assert m["ttfa"]["p50"] > m["ttft"]["p50"]
    assert m["itl_answer"]["count"] == 12 * 23  # answer tokens after the first answer chunk, one token each


def test_a_request_that_turns_thinking_off_streams_no_reasoning(sim, tmp_path, capsys):
    result, recs, truth = run(sim, profile(sim.url, tmp_path, api="openai-chat", requests=4, out=20,
                                           extra={"chat_template_kwargs": {"enable_thinking": False}}))
    assert all(r.reasoning_tokens is None and r.answer_chunk == 0 for r in recs)
    assert all(truth_of(result, r, truth)["reasoning_tokens"] == 0 for r in recs)
    assert main(["report", str(result.run_dir)]) == 11
    table = capsys.readouterr().out
    assert "ttft" in table and "ttfa" not in table and "reasoning_tokens" not in table


def test_the_reasoning_rows_are_in_the_report_of_a_run_that_reasoned(sim, tmp_path, capsys):
    result, _, _ = run(sim, profile(sim.url, tmp_path, api="openai-chat", requests=4, out=20))
    assert main(["report", str(result.run_dir)]) == 11
    table = capsys.readouterr().out
    for row in ("ttfa", "reasoning_tokens", "answer_tokens", "itl_answer"):
        assert f"\n{row} " in table, row


def test_a_run_without_streaming_measures_e2e_as_the_server_saw_it_and_says_why_there_is_no_ttft(
        sim, tmp_path, capsys):
    # long enough (~0.1 s each) that the loopback's share is small beside the 1 % asked, on a busy machine too
    result, recs, truth = run(sim, profile(sim.url, tmp_path, requests=24, out=200, stream=False, warmup=4))
    assert result.exit_code == 11, result
    ratios = []
    for r in recs:
        t = truth_of(result, r, truth)
        assert t["stream"] is False and r.output_tokens == t["completion_tokens"] == 200
        assert r.new_connection is False  # the warmup opened the connections
        ratios.append((r.end_ns - r.start_ns) / (t["end_ns"] - t["arrival_ns"]))
    # the client's span (POST begun -> last byte's kernel stamp) and the server's (handler start ->
    # its bookkeeping after the last write) differ by the loopback's transfer either way
    assert 0.99 <= statistics.median(ratios) <= 1.01, sorted(ratios)
    m = load_json(result.run_dir / "summary.json")["levels"]["4"]["metrics"]
    assert "e2e" in m and not {"ttft", "itl", "tpot", "inter_chunk"} & m.keys()
    assert main(["report", str(result.run_dir)]) == 11
    out = capsys.readouterr().out
    assert "not streamed (load.stream: false)" in out and "\nttft " not in out and "\ne2e " in out


@pytest.mark.timing
def test_ttfa_less_ttft_is_the_reasoning_time_the_simulator_took(tmp_path):
    """Per request, the client's first answer chunk less its first chunk equals the truth log's
    first answer write less its first reasoning write (one decode step per token at a fixed step),
    to within the stamps' stated bounds and 0.5 ms."""
    with SimProcess(SimConfig(fixed_step_us=2000.0, reasoning_tokens=10), startup_timeout=60) as s:
        result, recs, truth = run(s, profile(s.url, tmp_path, api="openai-chat", requests=16, out=30, warmup=4))
    assert result.exit_code == 11, result
    for r in recs:
        chunks = truth_of(result, r, truth)["chunks"]
        first = next(c["send_ns"] for c in chunks if c["kind"] == "reasoning")
        answer = next(c["send_ns"] for c in chunks if c["kind"] == "tokens")
        assert r.answer_chunk is not None and r.reasoning_tokens == 10
        client = r.chunk_ns[r.answer_chunk] - r.chunk_ns[0]
        slack = max(r.chunk_early_ns[r.answer_chunk], r.chunk_early_ns[0]) + 500_000
        assert abs(client - (answer - first)) <= slack, (client, answer - first, slack)
        assert (answer - first) >= 9 * 2_000_000 * 0.9  # ten reasoning tokens, one 2 ms step each


def test_a_baseline_of_a_profile_with_a_secret_in_extra_body_keeps_the_template_and_a_check_reads_it(
        sim, tmp_path, monkeypatch, capsys):
    """`loadgate baseline` then `loadgate check` on one engine with `${NAME}` in target.extra_body:
    the baseline holds the body as written (the secret nowhere), loads again (its content hash holds)
    and the check passes; the check's requests carried the secret's value."""
    import yaml

    from tests.profiles import tiny_corpus

    monkeypatch.setenv("LG_BODY_SECRET", SECRET)
    doc = {"name": "sec", "target": {"endpoint": sim.url, "api": "openai-completions",
                                     "extra_body": {"user_tag": "${LG_BODY_SECRET}"}},
           "exactness": {"baseline": "sim-reference", "corpus": str(tiny_corpus(tmp_path)),
                         "contract": {"tier": "bit-exact"}, "scenarios": {"solo": True}},
           "output": {"dir": str(tmp_path / "out"), "run_id": "c"}}
    p = tmp_path / "base.yaml"
    p.write_text(yaml.safe_dump(doc))
    sim.reset_truth()
    assert main(["baseline", str(p), "--out", str(tmp_path / "bl")]) == 0
    written = capsys.readouterr().out.strip().splitlines()[-1]
    data = Path(written).read_bytes()
    assert SECRET.encode() not in data and b"${LG_BODY_SECRET}" in data
    doc["exactness"]["baseline"] = written
    p.write_text(yaml.safe_dump(doc))
    assert main(["check", str(p)]) == 0, capsys.readouterr()
    assert {t["params"]["user_tag"] for t in sim.truth_records()} == {SECRET}
    for f in (tmp_path / "out").rglob("*"):
        if f.is_file():
            assert SECRET.encode() not in f.read_bytes(), f


def test_an_unstreamed_sweep_renders_its_capacity_and_category_tables_without_chunk_figures(sim, tmp_path, capsys):
    p = profile(sim.url, tmp_path, requests=8, out=10, stream=False)
    p = replace(p, load=replace(p.load, concurrency=(2, 4)), slo=Slo(ttft_ms=1000.0, e2e_ms=5000.0))
    result, _, _ = run(sim, p)
    assert result.exit_code == 11
    assert main(["report", str(result.run_dir)]) == 11
    out = capsys.readouterr().out
    assert "capacity:" in out and "no concurrency met the SLOs" in out  # no ttft: no level meets a ttft SLO
    assert main(["report", "--format", "markdown", str(result.run_dir)]) == 11
    assert main(["report", "--html", str(result.run_dir)]) == 11  # the plots of what an unstreamed run has
    assert sorted(p.name for p in (result.run_dir / "plots").glob("*.png")) == ["latency_cdfs.png", "server_timeline.png"]


def test_a_measured_requests_seed_does_not_move_with_the_warmup(sim, tmp_path):
    req = RequestSettings(seed="per_request")
    seeds = []
    for warmup in (0, 4):
        result, recs, truth = run(sim, profile(sim.url, tmp_path / str(warmup), requests=6, request=req, warmup=warmup))
        seeds.append(sorted(truth_of(result, r, truth)["params"]["seed"] for r in recs))
    assert seeds[0] == seeds[1]
