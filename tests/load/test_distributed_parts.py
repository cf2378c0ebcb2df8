"""The parts of `load.distributed` that need no cluster: clock offsets from round trips, the relay of
whole exchange frames, the verdict's reading of distributed.json, records v10, the command line's
flags, and the bad inputs that stop a run before anything starts (no Ray: exit 2; nothing at the
address: exit 3, at once)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from loadgate.cli import main
from loadgate.config.profile import HealthBudgets, load_profile, with_distributed
from loadgate.core.clocks import Offset, best_offset, read_offset, uncertainty_ns
from loadgate.errors import UsageError
from loadgate.load.exchanges import ByteTail, Exchange, ExchangeLog, whole_frames
from loadgate.load.exchanges import read as read_log
from loadgate.load.target import Raw
from loadgate.records import Record, read_records
from tests.profiles import LAX_HEALTH


def test_the_offset_is_the_least_round_trips_midpoint_and_known_within_half_of_it():
    # (driver t1, host t2, driver t4): the second round trip is the shortest
    got = best_offset([(0, 1_000_150, 300), (1_000, 1_001_060, 1_100), (2_000, 1_002_400, 2_600)])
    assert got == Offset(offset_ns=1_001_060 - 1_050, within_ns=50, rtt_ns=100)
    # a host 5 ms ahead, 80 µs each way: read exactly (its reading lies at the midpoint), within 80 µs
    ticks = iter(range(0, 10**9, 80_000))
    got = read_offset(lambda: next(ticks) + 5_000_000, rounds=4, clock=lambda: next(ticks))
    assert (got.offset_ns, got.within_ns, got.rtt_ns) == (5_000_000, 80_000, 160_000)
    with pytest.raises(ValueError):
        best_offset([])


def test_what_the_start_offset_is_known_within_grows_with_how_far_it_moved_by_the_end():
    start, end = Offset(100_000, 50_000, 100_000), Offset(3_100_000, 20_000, 40_000)
    assert uncertainty_ns(start, end) == 50_000 + 3_000_000
    assert uncertainty_ns(start, start) == 50_000


def test_a_drifting_node_clock_runs_fast_by_its_parts_per_million():
    code = ("import time; from loadgate.core.clocks import wall_ns; a = wall_ns(); t = time.time_ns(); "
            "time.sleep(0.2); print((wall_ns() - a) / (time.time_ns() - t))")
    env = {**os.environ, "LOADGATE_CLOCK_DRIFT_PPM": "500000"}
    ratio = float(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                                 check=True, timeout=60).stdout)
    assert 1.4 < ratio < 1.6  # 50 % fast, however long the sleep really took


def _exchange(i: int) -> Exchange:
    raw = Raw(start_ns=1, headers_ns=2, end_ns=3, status=200, reads=[(2, b"data: x" * (i + 1))])
    return Exchange(i, False, 8, 2, 0, 4, 0, None, raw)


def test_the_relay_takes_whole_frames_only_and_its_copy_reads_as_the_log(tmp_path: Path):
    src = tmp_path / "w.lgx"
    log = ExchangeLog(src, {"api": "openai-completions", "stream": True, "max_event_bytes": 1 << 20})
    for i in range(3):
        log.add(_exchange(i))
    log.close()
    whole = src.read_bytes()
    half = whole[: len(whole) - 5]  # the last frame cut, as a batch still being written
    src.write_bytes(half)
    tail = ByteTail(src)
    first = tail.new()
    assert whole_frames(half) == len(first) < len(half) and tail.new() == b""
    src.write_bytes(whole)
    copy = tmp_path / "copy.lgx"
    copy.write_bytes(first + tail.new())
    contents = read_log(copy)
    assert contents is not None and [x.i for x in contents.exchanges] == [0, 1, 2]
    assert ByteTail(tmp_path / "missing.lgx").new() == b""


def test_records_v10_name_actor_and_node_and_a_node_that_is_not_text_is_refused(tmp_path: Path):
    rec = Record(i=0, warmup=False, level=1, intended_ns=None, ready_ns=0, start_ns=0, headers_ns=1, end_ns=2,
                 status=200, error=None, prompt_tokens_planned=4, output_tokens_planned=1, prompt_tokens=4,
                 completion_tokens=1, actor=2, node="abc123")
    path = tmp_path / "records.jsonl"
    path.write_bytes(rec.to_json() + rec.to_json().replace(b'"node":"abc123"', b'"node":7'))
    with pytest.raises(UsageError, match=r"records\.jsonl:2: .*node"):
        list(read_records(path))
    path.write_bytes(rec.to_json())
    (back,) = read_records(path)
    assert (back.v, back.actor, back.node) == (10, 2, "abc123")


def _profile(tmp: Path, distributed: dict[str, object] | None) -> Path:
    doc = {"name": "d", "target": {"endpoint": "embedded"},
           "workload": {"requests": 2, "input_len": {"dist": "fixed", "value": 8},
                        "output_len": {"dist": "fixed", "value": 2}},
           "load": {"concurrency": 1, **({"distributed": distributed} if distributed else {})},
           "health": LAX_HEALTH, "output": {"dir": str(tmp / "out")}}
    p = tmp / "p.yaml"
    p.write_text(yaml.safe_dump(doc))
    return p


def test_the_command_lines_ray_flags_set_load_distributed_and_say_what_is_wrong(tmp_path: Path):
    plain = load_profile(str(_profile(tmp_path, None)))
    assert with_distributed(plain, None, None) is plain
    d = with_distributed(plain, "ray://10.0.0.1:10001", 4).load.distributed
    assert d is not None and (d.address, d.actors, d.per_actor.cpus) == ("ray://10.0.0.1:10001", 4, 1.0)
    with pytest.raises(UsageError, match="--actors: the profile has no load.distributed"):
        with_distributed(plain, None, 3)
    with pytest.raises(UsageError, match="--ray: give auto, host:port or ray://host:port, got 'nowhere'"):
        with_distributed(plain, "nowhere", None)
    kept = with_distributed(load_profile(str(_profile(tmp_path, {"address": "auto", "actors": 5}))), None, 2)
    assert kept.load.distributed is not None and kept.load.distributed.actors == 2


def test_a_profile_with_a_bad_ray_address_is_refused_naming_its_key(tmp_path: Path, capsys):
    assert main(["validate", str(_profile(tmp_path, {"address": "10.0.0.1"}))]) == 2
    err = capsys.readouterr().err
    assert "load.distributed.address" in err and "give auto, host:port or ray://host:port" in err


def test_without_ray_installed_a_distributed_run_stops_with_one_line_and_exit_2(tmp_path: Path, capsys,
                                                                                  monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    assert main(["run", "--unverified", "-q", str(_profile(tmp_path, {"address": "127.0.0.1:1"}))]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "loadgate: load.distributed: backend ray needs Ray: pip install 'loadgate[ray]'"
    assert not (tmp_path / "out").exists()  # before anything started


def test_nothing_listening_at_the_ray_address_is_exit_3_at_once(tmp_path: Path, capsys):
    pytest.importorskip("ray")  # (the [dev] extra brings it)
    t = time.monotonic()
    assert main(["run", "--unverified", "-q", "--ray", "127.0.0.1:1", str(_profile(tmp_path, None))]) == 3
    assert time.monotonic() - t < 60  # Ray's own connect would retry for minutes
    err = capsys.readouterr().err.strip()
    assert err.startswith("loadgate: load.distributed.address: no Ray cluster at 127.0.0.1:1:") and "\n" not in err
    assert not (tmp_path / "out").exists()


def _dist(lost: list[dict[str, object]], within: float | None = 0.4) -> dict[str, object]:
    actors = [{"actor": a, "node": f"node{a}" + "0" * 20, "ip": f"10.0.0.{a}", "offset_start_ms": 0.1,
               "known_within_ms": within if a == 1 else 0.3} for a in range(2)]
    return {"backend": "ray", "address": "auto", "levels": {"4": {"actors": actors, "lost": lost}}}


def _rec(i: int, actor: int) -> Record:
    return Record(i=i, warmup=False, level=4, intended_ns=None, ready_ns=0, start_ns=0, headers_ns=1, end_ns=2,
                  status=200, error=None, prompt_tokens_planned=4, output_tokens_planned=1, prompt_tokens=4,
                  completion_tokens=1, actor=actor, node=f"node{actor}" + "0" * 20)


def test_the_verdict_names_a_lost_actor_and_a_loosely_known_clock_and_nothing_else():
    from loadgate.analysis.distributed import actor_lines, problems

    budgets = HealthBudgets(**{**LAX_HEALTH, "clock_offset_ms": 5.0})
    recs = [_rec(i, i % 2) for i in range(9)]
    assert problems(_dist([]), recs, budgets) == []
    lost = [{"actor": 1, "node": "node1" + "0" * 20, "ip": "10.0.0.1", "why": "The actor died unexpectedly"}]
    (said,) = problems(_dist(lost, within=None), recs, budgets)
    assert said == ("part of the plan was not sent: level 4: actor 1 on node node10000000 (10.0.0.1) was lost "
                    "(The actor died unexpectedly); the 4 records it streamed before are kept and counted")
    (loose,) = problems(_dist([], within=7.25), recs, budgets)
    assert loose.startswith("level 4: actor 1 on node node10000000 (10.0.0.1): its clock's offset to the driver is "
                            "known only within 7.25 ms (health.clock_offset_ms 5)")
    (unread,) = problems(_dist([], within=None), recs, budgets)
    assert "its clock offset was not read at the level's end" in unread
    lines = actor_lines(_dist([]), recs)
    assert lines[0].startswith("actor 0 (level 4) on node node00000000 (10.0.0.0): 5 records")


def test_a_credential_written_as_a_literal_is_refused_under_ray_before_anything_starts(tmp_path: Path, capsys):
    """Actors get the profile through Ray's object store: a literal key would travel; ${NAME} does not."""
    p = _profile(tmp_path, {"address": "127.0.0.1:1"})
    doc = yaml.safe_load(p.read_text())
    doc["target"]["headers"] = {"Authorization": "Bearer sk-literal-1234"}
    p.write_text(yaml.safe_dump(doc))
    assert main(["run", "--unverified", "-q", str(p)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("loadgate: target.headers.Authorization: under load.distributed write the credential as "
                          "${NAME}") and "sk-literal" not in err
    doc["target"]["headers"] = {"Authorization": "Bearer ${SOME_KEY}"}  # a template: allowed past this check
    from loadgate.load.distributed import refuse_literal_secrets

    p.write_text(yaml.safe_dump(doc))
    refuse_literal_secrets(load_profile(str(p)))


def test_a_crashed_drivers_relayed_logs_are_read_back_with_their_actor_and_node(tmp_path: Path):
    from loadgate.jsonutil import dump_json
    from loadgate.load.recorder import recover

    log = ExchangeLog(tmp_path / "exchanges" / "r-L4-part-r-L4-0.a2.lgx",
                      {"api": "openai-completions", "stream": True, "max_event_bytes": 1 << 20})
    log.add(_exchange(0))
    log.close()
    dump_json(tmp_path / "distributed.json", {"levels": {"4": {"actors": [{"actor": 2, "node": "n2"}], "lost": []}}})
    (rec,), paths = recover(tmp_path)
    assert (rec.actor, rec.node) == (2, "n2") and len(paths) == 1


def test_a_distributed_run_without_its_distributed_json_is_not_judged_as_one_hosts():
    from loadgate.verdict import distributed_invalid

    meta = {"profile": {"load": {"distributed": {"address": "auto"}}}}
    (said,) = distributed_invalid(Path("/nonexistent"), meta, ["4"])
    assert "distributed.json is missing or damaged" in said
    assert distributed_invalid(Path("/nonexistent"), {"profile": {"load": {}}}, ["4"]) == []


def test_a_searchs_distributed_checks_judge_only_the_probes_its_answer_rests_on(tmp_path: Path):
    """A probe the bracket does not rest on may be loose (as its own INVALID probe may be); a lost actor
    counts wherever it was lost."""
    from loadgate.jsonutil import dump_json
    from loadgate.verdict import distributed_invalid

    loose = _dist([], within=9.0)["levels"]["4"]
    dump_json(tmp_path / "distributed.json", {"levels": {"4": loose, "8": _dist([])["levels"]["4"]}})
    meta = {"profile": {"load": {"distributed": {"address": "auto"}}, "health": {"clock_offset_ms": 5.0}}}
    assert distributed_invalid(tmp_path, meta, ["8"]) == []
    (said,) = distributed_invalid(tmp_path, meta, ["4", "8"])
    assert said.startswith("level 4: actor 1") and "known only within 9.00 ms" in said
    lost = {"actor": 0, "node": "n0", "ip": "10.0.0.0", "why": "killed"}
    dump_json(tmp_path / "distributed.json", {"levels": {"4": {**loose, "lost": [lost]}, "8": _dist([])["levels"]["4"]}})
    assert any("part of the plan was not sent: level 4" in m for m in distributed_invalid(tmp_path, meta, ["8"]))


def test_an_actor_yields_its_cores_to_its_workers_its_own_threads_and_later_ones_at_a_higher_nice():
    """`ray_actor.yield_to_workers`: every thread of the actor's process, and a thread it starts later,
    runs at nice ACTOR_NICE (or the process's own where that is higher); a process started before (its
    worker) keeps the process's."""
    code = """
import os, subprocess, sys, threading, time
from loadgate.load.ray_actor import ACTOR_NICE, yield_to_workers
base = os.nice(0)
worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
before = threading.Thread(target=time.sleep, args=(30,), daemon=True)
before.start()
yield_to_workers()
after = threading.Thread(target=time.sleep, args=(30,), daemon=True)
after.start()
def nice(pid, tid):
    return int(open(f"/proc/{pid}/task/{tid}/stat").read().rsplit(")", 1)[1].split()[16])
mine = {int(t): nice(os.getpid(), t) for t in os.listdir("/proc/self/task")}
import json
print(json.dumps({"want": max(ACTOR_NICE, base), "threads": list(mine.values()),
                  "worker": nice(worker.pid, worker.pid), "parent": base}))
worker.kill()
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         cwd=Path(__file__).resolve().parents[2])
    assert out.returncode == 0, out.stderr
    import json

    got = json.loads(out.stdout)
    assert len(got["threads"]) >= 3 and set(got["threads"]) == {got["want"]}, got  # (10, or the runner's if higher)
    assert got["worker"] == got["parent"], got


def _relaying_actor(monkeypatch: pytest.MonkeyPatch, take: Any, *, workers: int, taken: int = 0,
                    stop: Any = None) -> Any:
    """A `LoadActor` with only what `_relay` uses: a stand-in counter whose `take.remote(m)` answers at
    once (`ray.get` passes it through), the group's feed queue and `taken` semaphore, a stop flag."""
    import queue
    import threading
    import types

    from loadgate.load import ray_actor
    from loadgate.load.executors import StopFlag

    monkeypatch.setitem(sys.modules, "ray", types.SimpleNamespace(get=lambda x, timeout=None: x))
    actor = object.__new__(ray_actor.LoadActor)
    actor.counter = types.SimpleNamespace(take=types.SimpleNamespace(remote=take))
    actor.group = types.SimpleNamespace(feed=queue.Queue(), taken=threading.Semaphore(taken),
                                        stop=stop or (lambda: None))
    actor.workers, actor.relay_stop, actor.relay_error, actor.stop_flag = workers, threading.Event(), None, StopFlag()
    return actor


def test_an_actor_draws_plan_indices_a_quarter_of_its_slots_at_a_time_and_each_once(monkeypatch):
    """`LoadActor._relay` against a stand-in counter: every index of the plan reaches the workers once,
    in order, with an index waiting for each slot from the start, and the counter is called once a
    batch (a quarter of the slots) however slowly the slots free up, not once a request (40 slots,
    400 requests a millisecond apart: at most 38 calls, where one a request would make ~360)."""
    import threading

    calls: list[int] = []
    state = {"next": 0, "end": 400}

    def take(m: int) -> list[int]:
        calls.append(m)
        got = list(range(state["next"], min(state["end"], state["next"] + m)))
        state["next"] += len(got)
        return got

    actor = _relaying_actor(monkeypatch, take, workers=1)
    depth, sent = 40, []

    def worker() -> None:  # a slot frees every millisecond and takes the next waiting index
        while (k := actor.group.feed.get(timeout=10)) is not None:
            sent.append(k)
            actor.group.taken.release()
            time.sleep(0.001)

    w = threading.Thread(target=worker)
    w.start()
    actor._relay(depth)
    w.join(10)
    assert sent == list(range(400))
    assert calls[0] == depth and all(m >= depth // 4 for m in calls[1:]) and len(calls) <= 38, calls


def test_an_actor_whose_counter_fails_stops_its_phase_says_why_and_ends_every_worker(monkeypatch):
    """`LoadActor._relay` when the shared counter stops answering after its first draw: the indices
    drawn reach the workers, then the phase is stopped (stop flag set, the group told), the reason is
    kept for `poll`, and every worker gets its end mark."""

    def take(m: int) -> list[int]:
        if take.calls:  # type: ignore[attr-defined]
            raise TimeoutError("no answer")
        take.calls += 1  # type: ignore[attr-defined]
        return list(range(m))

    take.calls = 0  # type: ignore[attr-defined]
    stopped: list[bool] = []
    actor = _relaying_actor(monkeypatch, take, workers=2, taken=8, stop=lambda: stopped.append(True))
    actor._relay(8)
    got = [actor.group.feed.get_nowait() for _ in range(actor.group.feed.qsize())]
    assert got == [*range(8), None, None]
    assert actor.stop_flag.is_set() and stopped == [True]
    assert actor.relay_error == "the shared counter did not answer: TimeoutError"
