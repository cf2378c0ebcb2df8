"""Several replicas of one configuration (`target.endpoints`, route via_router; docs/replicas.md),
against simulator children on loopback: every replica is fingerprinted before anything is sent and
again after the run, an odd one stops the run with exit 11 naming it and the field that differs,
and the exactness check runs once, on replica 0 (the simulators' truth logs show where each
generation request went)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from loadgate.cli import main
from loadgate.config.simconfig import SimConfig
from loadgate.jsonutil import load_json
from loadgate.sim.process import SimProcess
from tests.profiles import LAX_HEALTH, tiny_corpus

FAST = {"decode_step_us": 150.0, "decode_us_per_seq": 5.0, "prefill_us_per_token": 0.5}
REQUESTS = 12
MANY = 61  # round robin over 2 or 3: counts per replica not all equal


@pytest.fixture(scope="module")
def sims() -> Iterator[list[SimProcess]]:
    """Three alike replicas, and a fourth started with another decode step."""
    procs = [SimProcess(SimConfig(**FAST), startup_timeout=60) for _ in range(3)]
    procs.append(SimProcess(SimConfig(**{**FAST, "decode_step_us": 900.0}), startup_timeout=60))
    try:
        for sp in procs:
            sp.start()
        yield procs
    finally:
        for sp in procs:
            sp.stop()


def write_profile(tmp: Path, router: str, replicas: list[str], baseline: str | None = None) -> Path:
    doc: dict[str, Any] = {
        "name": "replicas",
        "target": {"endpoint": router, "route": "via_router", "endpoints": replicas},
        "workload": {"requests": REQUESTS, "input_len": {"dist": "fixed", "value": 16},
                     "output_len": {"dist": "fixed", "value": 8}},
        "load": {"concurrency": 2},
        "exactness": {"baseline": baseline or "none-yet", "corpus": str(tiny_corpus(tmp)),
                      "contract": {"tier": "bit-exact"}, "scenarios": {"solo": True}},
        "health": LAX_HEALTH,
        "output": {"dir": str(tmp / "out"), "run_id": "r"},
    }
    path = tmp / "p.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def with_baseline(tmp: Path, router: str, replicas: list[str], capsys: pytest.CaptureFixture[str]) -> Path:
    """The profile, with a baseline captured from the router first."""
    p = write_profile(tmp, router, replicas)
    assert main(["baseline", str(p), "--out", str(tmp / "b")]) == 0
    base = capsys.readouterr().out.strip().splitlines()[-1]
    return write_profile(tmp, router, replicas, base)


def generations(sp: SimProcess) -> int:
    return len(sp.truth_records())


@pytest.mark.parametrize("n", [2, 3])
def test_alike_replicas_are_all_fingerprinted_and_the_check_runs_once_on_replica_0(sims, tmp_path, capsys, n):
    alike = sims[:n]
    urls = [sp.url for sp in alike]
    p = with_baseline(tmp_path, urls[0], urls, capsys)
    for sp in alike:
        sp.reset_truth()
    assert main(["run", str(p)]) == 0
    out = capsys.readouterr().out
    assert f"the exactness check runs once, on replica 0 ({urls[0]}); all {n} fingerprints are read" in out
    run = tmp_path / "out" / "r"
    att = load_json(run / "attestation.json")
    assert att["replicas"]["checked_on"] == 0
    assert [x["url"] for x in att["replicas"]["endpoints"]] == urls
    assert {x["fingerprint_hash"] for x in att["replicas"]["endpoints"]} == {att["fingerprint_hash"]}
    meta = load_json(run / "meta.json")
    assert meta["replicas"] == {"route": "via_router", "endpoints": urls, "router": urls[0],
                                "exactness_checked_on": 0}
    assert meta["attestation"]["replicas"] == att["replicas"]
    # the check's 3 cases and the run's requests all went to replica 0 (here also the router); the
    # other replicas were only asked what they are
    assert generations(alike[0]) == 3 + REQUESTS
    assert [generations(sp) for sp in alike[1:]] == [0] * (n - 1)


@pytest.mark.parametrize("n", [2, 3])
def test_a_replica_started_with_another_decode_step_stops_the_run_with_exit_11_naming_it(sims, tmp_path, capsys, n):
    replicas = [*sims[:n - 1], sims[3]]
    urls = [sp.url for sp in replicas]
    p = with_baseline(tmp_path, urls[0], urls[:-1], capsys)  # a baseline from an alike pair
    p = write_profile(tmp_path, urls[0], urls, yaml.safe_load(p.read_text())["exactness"]["baseline"])
    for sp in replicas:
        sp.reset_truth()
    for extra in ([], ["--unverified"]):
        assert main(["run", "-q", *extra, str(p)]) == 11
        err = capsys.readouterr().err
        assert f"replica {n - 1} ({urls[-1]}) is not configured like replica 0 ({urls[0]}) before anything " \
               "was measured" in err
        assert "decode_step_us: 150.0 -> 900.0" in err
        assert [generations(sp) for sp in replicas] == [0] * n  # nothing was sent: no check, no load
        assert not (tmp_path / "out" / "r" / "records.jsonl").exists()


def test_a_replica_whose_fingerprint_changes_during_the_run_voids_it(sims, tmp_path, capsys, monkeypatch):
    import loadgate.runs as runs

    restarted: list[SimProcess] = []
    moved = sims[1]
    port = int(moved.url.rsplit(":", 1)[1])
    real_measure = runs.measure

    async def measure_then_restart_replica_1(*a: Any, **k: Any) -> None:
        await real_measure(*a, **k)
        moved.stop()  # the same port, another decode step: replica 1 is no longer what was attested
        restarted.append(SimProcess(SimConfig(**{**FAST, "decode_step_us": 900.0}), port=port).start())

    urls = [sp.url for sp in sims[:3]]
    p = with_baseline(tmp_path, urls[0], urls, capsys)
    monkeypatch.setattr(runs, "measure", measure_then_restart_replica_1)
    try:
        code = main(["run", "-q", str(p)])
    finally:
        for sp in restarted:
            sp.stop()
        moved.start()  # (the module's fixture stops it again)
    err = capsys.readouterr().err
    assert code == 11
    assert f"replica 1 ({urls[1]}) is not configured like replica 0 ({urls[0]}) during the measurement" in err
    assert "decode_step_us: 150.0 -> 900.0" in err
    assert main(["report", str(tmp_path / "out" / "r")]) == 11  # the folder says so when judged again


def test_loadgate_fingerprint_prints_the_replicas_one_fingerprint_or_names_the_odd_one(sims, tmp_path, capsys):
    alike, odd = [sp.url for sp in sims[:3]], [sims[0].url, sims[3].url]
    assert main(["fingerprint", str(write_profile(tmp_path, alike[0], alike))]) == 0
    doc = yaml.safe_load(capsys.readouterr().out)  # (JSON is YAML)
    one = write_profile(tmp_path, alike[0], alike)
    single = yaml.safe_load(one.read_text())
    single["target"] = {"endpoint": alike[2]}  # replica 2 alone gives the same fingerprint
    one.write_text(yaml.safe_dump(single))
    assert main(["fingerprint", str(one)]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["fingerprint_hash"] == doc["fingerprint_hash"]
    assert main(["fingerprint", str(write_profile(tmp_path, odd[0], odd))]) == 11
    err = capsys.readouterr().err
    assert f"replica 1 ({odd[1]}) is not configured like replica 0" in err
    assert "engine.server_info.sim.decode_step_us: 150.0 -> 900.0" in err, err


def round_robin(p: Path, replicas: list[str], requests: int = REQUESTS) -> Path:
    """The profile at `p`, its requests spread by round robin over `replicas` (no router)."""
    doc = yaml.safe_load(p.read_text())
    doc["target"] = {"endpoints": replicas}
    doc["load"]["warmup_requests"] = 3
    doc["workload"]["requests"] = requests
    p.write_text(yaml.safe_dump(doc))
    return p


@pytest.mark.parametrize(("n", "workers"), [(2, 1), (3, 1), (3, 2)])
def test_round_robin_spreads_the_plan_over_the_replicas_and_reports_each_one(sims, tmp_path, capsys, n, workers):
    from loadgate.records import read_records

    alike = sims[:n]
    urls = [sp.url for sp in alike]
    p = round_robin(with_baseline(tmp_path, urls[0], urls, capsys), urls, MANY)
    doc = yaml.safe_load(p.read_text())
    doc["load"]["workers"] = workers  # worker processes: each holds a pool per replica
    p.write_text(yaml.safe_dump(doc))
    for sp in alike:
        sp.reset_truth()
    assert main(["run", str(p)]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    run = tmp_path / "out" / "r"
    recs = list(read_records(run / "records.jsonl", include_warmup=True))
    assert len(recs) == 3 + MANY and all(r.endpoint == r.i % n for r in recs)
    # the simulators' own logs: each got the requests whose plan index names it (request ids
    # RUN-L2w-i / RUN-L2-i), counts within one of each other; replica 0 also the check's 3 cases
    served = [{t["request_id"].rsplit("-", 1)[1] for t in sp.truth_records() if "-L2" in t["request_id"]}
              for sp in alike]
    assert served == [{str(r.i) for r in recs if r.endpoint == k} for k in range(n)]
    counts = [len(s) for s in served]
    assert max(counts) - min(counts) <= 1 and sum(counts) == len(recs)
    assert len(alike[0].truth_records()) == 3 + counts[0]
    # per-endpoint figures, as a group of the level
    g = load_json(run / "summary.json")["levels"]["2"]["groups"]["endpoint"]
    measured = [r for r in recs if not r.warmup]
    assert list(g["by"]) == [str(k) for k in range(n)]
    assert [g["by"][str(k)]["requests"] for k in range(n)] == [sum(r.endpoint == k for r in measured) for k in range(n)]
    assert "by endpoint:" in out
    assert load_json(run / "meta.json")["replicas"]["route"] == "round_robin"
    # the server counters are every replica's, summed: the contamination check sees all the traffic
    assert "contamination check passed" in out


def test_traffic_the_client_did_not_send_to_one_replica_is_caught(sims, tmp_path, capsys, monkeypatch):
    import loadgate.load.levels as levels

    urls = [sp.url for sp in sims[:2]]
    p = round_robin(with_baseline(tmp_path, urls[0], urls, capsys), urls)
    real, calls = levels.scrape_all, []

    async def scrape_then_send_to_replica_1(session: Any, metrics_urls: list[str]) -> Any:
        snap = await real(session, metrics_urls)
        if not calls:  # the window's first scrape: then one request the client's plan never made, to replica 1
            async with session.post(f"{urls[1]}/v1/completions", json={
                    "model": SimConfig().model, "prompt": "foreign", "max_tokens": 5}) as r:
                assert r.status == 200
                await r.read()
        calls.append(metrics_urls)
        return snap

    monkeypatch.setattr(levels, "scrape_all", scrape_then_send_to_replica_1)
    code = main(["run", str(p)])
    out = capsys.readouterr().out
    assert calls[0] == [f"{u}/metrics" for u in urls]  # every replica's counters, summed
    assert "CONTAMINATION" in out and "server finished 13 requests in the window, the client 12" in out, out
    assert code == 30


def test_the_summed_counters_are_absent_when_one_replica_gives_no_metrics(sims):
    import aiohttp

    from loadgate.load.replica_metrics import scrape_all
    from loadgate.net.connect import run_async
    from loadgate.net.scrape import scrape

    async def go() -> tuple[Any, Any, Any, Any]:
        async with aiohttp.ClientSession() as session:
            for sp, n in zip(sims[:2], (3, 5), strict=True):  # some traffic of each replica's own
                async with session.post(f"{sp.url}/v1/completions", json={
                        "model": SimConfig().model, "prompt": "x", "max_tokens": n, "ignore_eos": True}) as r:
                    await r.read()
            a, b = (f"{sp.url}/metrics" for sp in sims[:2])
            return (await scrape(session, a), await scrape(session, b), await scrape_all(session, [a, b]),
                    await scrape_all(session, [a, "http://127.0.0.1:9/metrics"]))

    one, two, both, partial = run_async(go())
    for name in ("vllm:request_success_total", "vllm:generation_tokens_total"):
        assert both.total(name) == one.total(name) + two.total(name) and one.total(name) > 0
    assert partial is None  # a partial sum would read as traffic never counted


def test_sticky_keeps_each_conversations_turns_on_one_replica(sims, tmp_path, capsys):
    from loadgate.records import read_records

    urls = [sp.url for sp in sims[:3]]
    p = with_baseline(tmp_path, urls[0], urls, capsys)
    doc = yaml.safe_load(p.read_text())
    doc["target"] = {"endpoints": urls, "route": "sticky"}
    doc["workload"]["sessions"] = {"turns": 3}
    p.write_text(yaml.safe_dump(doc))
    for sp in sims[:3]:
        sp.reset_truth()
    assert main(["run", str(p)]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    run = tmp_path / "out" / "r"
    recs = [r for r in read_records(run / "records.jsonl", include_warmup=True) if r.conversation is not None]
    convs = {r.conversation for r in recs}
    assert len(convs) >= 3 and all(r.endpoint == r.conversation % 3 for r in recs)
    assert any(r.turn == 3 for r in recs)
    # the simulators' logs: every turn of a conversation reached the replica its conversation names
    served = [{int(t["request_id"].rsplit("-", 1)[1]) for t in sp.truth_records() if "-L2" in t["request_id"]}
              for sp in sims[:3]]
    by_i = {r.i: r for r in recs}
    for k, indices in enumerate(served):
        assert all(by_i[i].conversation % 3 == k for i in indices if i in by_i)
    assert sorted(i for s in served for i in s if i in by_i) == sorted(by_i)
    counts = [sum(1 for c in convs if c % 3 == k) for k in range(3)]
    assert max(counts) - min(counts) <= 1  # conversations, not requests, within one of each other
    assert "by endpoint:" in out and "contamination check passed" in out


def test_least_in_flight_sends_around_a_replica_that_stopped_answering(sims, tmp_path, capsys, monkeypatch):
    import os
    import signal
    import threading

    import loadgate.load.levels as levels
    from loadgate.records import read_records

    urls = [sp.url for sp in sims[:2]]
    p = with_baseline(tmp_path, urls[0], urls, capsys)
    doc = yaml.safe_load(p.read_text())
    doc["target"] = {"endpoints": urls, "route": "least_in_flight"}
    doc["workload"]["requests"] = 60
    doc["load"]["concurrency"] = 4
    p.write_text(yaml.safe_dump(doc))
    stuck = sims[1].pid
    assert stuck is not None
    real, timers = levels.scrape_all, []

    async def scrape_then_stop_replica_1(session: Any, metrics_urls: list[str]) -> Any:
        snap = await real(session, metrics_urls)
        if not timers:  # the window begins: replica 1 stops answering for 1.5 s (its requests hang)
            os.kill(stuck, signal.SIGSTOP)
            timers.append(threading.Timer(1.5, os.kill, (stuck, signal.SIGCONT)))
            timers[0].start()
        return snap

    monkeypatch.setattr(levels, "scrape_all", scrape_then_stop_replica_1)
    for sp in sims[:2]:
        sp.reset_truth()
    try:
        code = main(["run", str(p)])
    finally:
        for t in timers:
            t.join()
        os.kill(stuck, signal.SIGCONT)
    assert code == 0, capsys.readouterr().err
    recs = list(read_records(tmp_path / "out" / "r" / "records.jsonl"))
    assert len(recs) == 60 and all(r.succeeded for r in recs)
    on = [sum(r.endpoint == k for r in recs) for k in range(2)]
    # round robin would have sent 30 to each (and every slot would have waited on replica 1); here
    # replica 1 held at most the 4 slots' worth while it was stopped, and replica 0 took the rest
    assert on[1] <= 4 and on[0] == 60 - on[1], on
    served = [{int(t["request_id"].rsplit("-", 1)[1]) for t in sp.truth_records() if "-L4-" in t["request_id"]}
              for sp in sims[:2]]
    assert [sorted(s) for s in served] == [sorted(r.i for r in recs if r.endpoint == k) for k in range(2)]


def test_a_baseline_and_the_check_go_to_replica_0_never_through_the_router(sims, tmp_path, capsys):
    router, replicas = sims[2], sims[:2]
    for sp in sims[:3]:
        sp.reset_truth()
    p = with_baseline(tmp_path, router.url, [sp.url for sp in replicas], capsys)
    assert [generations(sp) for sp in (*replicas, router)] == [3, 0, 0]  # the baseline's 3 cases
    assert main(["check", str(p)]) == 0
    assert [generations(sp) for sp in (*replicas, router)] == [6, 0, 0]
