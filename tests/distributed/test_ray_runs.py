"""`load.distributed` against a real local Ray cluster of 3 nodes (tests/raycluster.py) and two
simulator replicas: the union of what the actors sent is the plan a single host sends (ids, planned
lengths, an open loop's intended starts), nothing lost or sent twice (the simulators' truth logs), every
record names its actor, node and endpoint; the API key reaches the simulators from each node's own
environment and appears nowhere in Ray's temp and log folders or spilled objects, nor in the run
folder; a killed actor fails the run with exit 30 naming it and its node, its streamed records kept,
and `loadgate report` gives the same outcome; a node whose clock moves during the level makes the run
INVALID."""

from __future__ import annotations

import glob
import os
import shutil
import signal
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from loadgate.cli import main
from loadgate.config.simconfig import SimConfig
from loadgate.jsonutil import load_json
from loadgate.records import read_records
from loadgate.sim.process import SimProcess
from tests.profiles import LAX_HEALTH
from tests.raycluster import KEY, KEY_ENV, local_cluster

FAST = {"decode_step_us": 1500.0, "decode_us_per_seq": 20.0, "prefill_us_per_token": 1.0, "api_key_env": KEY_ENV}
LAX = {**LAX_HEALTH, "clock_offset_ms": 1e9}  # tests not about the client's health or clocks


@pytest.fixture(scope="module")
def sims() -> Iterator[list[SimProcess]]:
    """Two replicas that want the key (401 without it)."""
    os.environ[KEY_ENV] = KEY
    procs = [SimProcess(SimConfig(**FAST), startup_timeout=60) for _ in range(2)]
    try:
        for p in procs:
            p.start()
        yield procs
    finally:
        for p in procs:
            p.stop()


def profile(tmp: Path, sims: list[SimProcess], address: str | None, run_id: str, *, load: dict[str, Any],
            requests: int = 60, health: dict[str, Any] | None = None, output_len: int = 16) -> Path:
    urls = [s.url for s in sims]
    doc: dict[str, Any] = {
        "name": "ray", "seed": 3,
        "target": {"endpoints": urls, "api_key_env": KEY_ENV},
        "workload": {"requests": requests, "input_len": {"dist": "uniform", "min": 8, "max": 40},
                     "output_len": {"dist": "fixed", "value": output_len}},
        "load": {**load, **({"distributed": {"address": address, "actors": 3}} if address else {})},
        "health": health or LAX,
        "output": {"dir": str(tmp / "out"), "run_id": run_id},
    }
    p = tmp / f"{run_id}.yaml"
    p.write_text(yaml.safe_dump(doc))
    return p


def generation_rids(sims: list[SimProcess]) -> Counter[str]:
    return Counter(t["request_id"] for s in sims for t in s.truth_records() if t["route"].endswith("/completions"))


def test_the_actors_send_the_single_host_plan_once_each_record_naming_actor_node_and_endpoint(
        cluster: Any, sims: list[SimProcess], tmp_path: Path, ray_temp: Path) -> None:
    for s in sims:
        s.reset_truth()
    closed = {"concurrency": 6, "warmup_requests": 3}
    assert main(["run", "--unverified", "-q", str(profile(tmp_path, sims, None, "one", load=closed))]) == 11
    assert main(["run", "--unverified", "-q", str(profile(tmp_path, sims, cluster.address, "ray", load=closed))]) == 11
    one = list(read_records(tmp_path / "out" / "one" / "records.jsonl", include_warmup=True))
    many = list(read_records(tmp_path / "out" / "ray" / "records.jsonl", include_warmup=True))
    assert sorted(r.i for r in many) == sorted(r.i for r in one) == list(range(63))  # each once
    plan_one = {r.i: (r.prompt_tokens_planned, r.output_tokens_planned, r.warmup) for r in one}
    assert {r.i: (r.prompt_tokens_planned, r.output_tokens_planned, r.warmup) for r in many} == plan_one
    assert all(r.error is None for r in many)  # every node sent its own key: no 401
    dist = load_json(tmp_path / "out" / "ray" / "distributed.json")
    actors = dist["levels"]["6"]["actors"]
    node_of = {a["actor"]: a["node"] for a in actors}
    assert sorted(node_of) == [0, 1, 2] and len(set(node_of.values())) == 3  # one actor a node
    assert all(a["ip"] == "127.0.0.1" for a in actors)
    assert all(r.actor in node_of and r.node == node_of[r.actor] for r in many)
    measured = Counter(r.actor for r in many if not r.warmup)
    assert sum(measured.values()) == 60 and min(measured.values()) >= 5  # the shared counter fed all three
    assert all(r.endpoint == r.i % 2 for r in many)  # round robin by plan index, named in every record
    # the simulators saw each of the distributed run's requests once: none lost, none sent twice
    sent = {rid: n for rid, n in generation_rids(sims).items() if rid.startswith("ray-")}
    assert len(sent) == 63 and set(sent.values()) == {1}
    # open loop: the same intended starts as a single host's, within what each actor's offset is known to
    opened = {"rate": 40, "arrival": "poisson", "warmup_requests": 3}
    assert main(["run", "--unverified", "-q", str(profile(tmp_path, sims, None, "one-o", load=opened))]) == 11
    assert main(["run", "--unverified", "-q", str(profile(tmp_path, sims, cluster.address, "ray-o",
                                                          load=opened))]) == 11
    o1 = {r.i: r.intended_ns for r in read_records(tmp_path / "out" / "one-o" / "records.jsonl")}
    recs = list(read_records(tmp_path / "out" / "ray-o" / "records.jsonl"))
    on = {r.i: r.intended_ns for r in recs}
    assert sorted(on) == sorted(o1) == list(range(3, 63))
    assert all(r.actor == r.i % 3 for r in recs)  # request k from actor k mod 3 (one worker each)
    within = {a["actor"]: a["known_within_ms"] for a in load_json(tmp_path / "out" / "ray-o" / "distributed.json")
              ["levels"]["40.0"]["actors"]}
    first1, firstn = o1[3], on[3]
    for r in recs:
        assert o1[r.i] is not None and r.intended_ns is not None
        skew_ms = abs((r.intended_ns - firstn) - (o1[r.i] - first1)) / 1e6
        assert skew_ms <= within[r.actor] + within[0] + 0.01, (r.i, skew_ms)
    # the key: read by each node from its environment, written nowhere Ray keeps things, nor in the runs
    key = KEY.encode()
    leaks = []
    for root in (ray_temp, tmp_path / "out"):
        for path in glob.glob(str(root / "**" / "*"), recursive=True):
            if os.path.isfile(path) and not os.path.islink(path):
                try:
                    with open(path, "rb") as f:
                        if key in f.read():
                            leaks.append(path)
                except OSError:
                    continue
    assert not leaks, leaks
    searched = [p for p in glob.glob(str(ray_temp / "**" / "logs" / "*"), recursive=True)]
    assert searched  # Ray's logs were there to search


def test_a_killed_actor_fails_the_run_with_exit_30_naming_it_its_streamed_records_kept(
        cluster: Any, sims: list[SimProcess], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "out" / "kill"
    p = profile(tmp_path, sims, cluster.address, "kill", load={"concurrency": 3, "warmup_requests": 3},
                requests=400, output_len=32)
    killed: dict[str, Any] = {}

    def killer() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            logs = [f for f in glob.glob(str(run / "exchanges" / "*.a1.lgx")) if "w-part" not in f]
            if (run / "distributed.json").exists() and logs and os.path.getsize(logs[0]) > 20_000:
                actor = load_json(run / "distributed.json")["levels"]["3"]["actors"][1]
                killed.update(actor)
                killed["at_ns"] = time.perf_counter_ns()  # (the simulators stamp arrivals on this clock)
                os.kill(actor["pid"], signal.SIGKILL)
                return
            time.sleep(0.05)

    t = threading.Thread(target=killer, daemon=True)
    t.start()
    for sim in sims:
        sim.reset_truth()
    assert main(["run", "--unverified", "-q", str(p)]) == 30
    t.join(5)
    assert killed, "the actor was not killed during the measured phase"
    out = capsys.readouterr().out
    name = f"actor 1 on node {killed['node'][:12]} (127.0.0.1) was lost"
    assert "part of the plan was not sent" in out and name in out
    recs = list(read_records(run / "records.jsonl"))
    of_1 = [r for r in recs if r.actor == 1]
    assert of_1 and len(recs) < 400  # what it streamed is kept; the level stopped
    assert f"the {len(of_1)} records it streamed before are kept and counted" in out
    assert len({r.i for r in recs}) == len(recs)
    # the killed actor's worker died with it: every request a simulator saw and the run did not record
    # reached it before the kill (in flight then, or finished after the actor's last relayed frames:
    # a lost node loses those), and nothing reached them after the run ended (nothing went on sending)
    reached = generation_rids(sims)
    time.sleep(1.0)
    assert generation_rids(sims) == reached and max(reached.values()) == 1, reached  # (none sent twice)
    recorded = {r.i for r in read_records(run / "records.jsonl", include_warmup=True)}
    arrivals = {t["request_id"]: t["arrival_ns"] for sim in sims for t in sim.truth_records()
                if t["route"].endswith("/completions")}
    assert recorded <= {int(rid.rsplit("-", 1)[1]) for rid in reached}
    unrecorded = {rid: arrivals[rid] - killed["at_ns"] for rid in reached if int(rid.rsplit("-", 1)[1]) not in recorded}
    # (100 ms: a request written just before the kill reaches a busy simulator's handler a little after it)
    assert all(after <= 100_000_000 for after in unrecorded.values()), unrecorded
    # the folder says the same to `report` (not INCOMPLETE)
    assert main(["report", str(run)]) == 30
    again = capsys.readouterr().out
    assert name in again and "INCOMPLETE" not in again
    assert not list((run / "exchanges").glob("*.lgx")) if (run / "exchanges").exists() else True


def test_a_node_without_the_key_in_its_environment_stops_the_run_with_one_line_naming_it(
        cluster: Any, sims: list[SimProcess], tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The driver has it; no node's environment does (they were started before it was set)."""
    monkeypatch.setenv("LOADGATE_RAY_ABSENT_KEY", KEY)  # (the simulators want KEY)
    p = profile(tmp_path, sims, cluster.address, "nokey", load={"concurrency": 3})
    doc = yaml.safe_load(p.read_text())
    doc["target"]["api_key_env"] = "LOADGATE_RAY_ABSENT_KEY"
    p.write_text(yaml.safe_dump(doc))
    assert main(["run", "--unverified", "-q", str(p)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith("loadgate: load.distributed: actor ")
    assert err.endswith("target.api_key_env: the environment variable LOADGATE_RAY_ABSENT_KEY is not set (or empty)")


def test_a_node_whose_clock_moves_during_the_level_makes_the_run_invalid(
        sims: list[SimProcess], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Node 2's wall clock runs 10 % fast (LOADGATE_CLOCK_DRIFT_PPM in its environment): over a level of
    a second or more its offset moves by 100 ms or more, beyond health.clock_offset_ms (20 ms here, so
    that the other nodes' round trips on a busy 2-core host stay well inside it)."""
    temp = Path(tempfile.mkdtemp(prefix="lgdrift-", dir="/tmp"))  # (short: Ray's socket paths)
    with local_cluster(temp, env={2: {"LOADGATE_CLOCK_DRIFT_PPM": "100000"}}) as c:
        p = profile(tmp_path, sims, c.address, "drift", load={"concurrency": 3, "warmup_requests": 3},
                    health={**LAX_HEALTH, "clock_offset_ms": 20.0}, requests=45)
        assert main(["run", "--unverified", "-q", str(p)]) == 30
    shutil.rmtree(temp, ignore_errors=True)
    out = capsys.readouterr().out
    dist = load_json(tmp_path / "out" / "drift" / "distributed.json")["levels"]["3"]["actors"]
    loose = [a for a in dist if a["known_within_ms"] > 20.0]
    assert len(loose) == 1 and loose[0]["known_within_ms"] > 60.0  # the drifting node's, and only it
    assert f"actor {loose[0]['actor']} on node {loose[0]['node'][:12]}" in out
    assert "its clock's offset to the driver is known only within" in out
    assert main(["report", str(tmp_path / "out" / "drift")]) == 30
