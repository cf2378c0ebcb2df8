"""The driver's side of a distributed run (`load.distributed`, docs/distributed.md): Ray actors on the
cluster's nodes send the plan, one run folder here receives it.

Ray places the client processes (`ray` on PyPI, the `[ray]` extra; KubeRay runs it on Kubernetes);
loadgate does not coordinate hosts itself. For each load level `RayGroup` starts `actors` actors
(`loadgate.load.ray_actor.LoadActor`, spread over the nodes, each with `load.workers` local worker
processes) and an `IndexCounter` actor for a closed loop's shared draws, and reads each node's clock offset
(`loadgate.core.clocks`). Each phase: every actor gets it and builds its bodies; all start at one
moment of the driver's wall clock; every quarter second the driver polls each actor for the whole
exchange frames its workers logged, appends them to `exchanges/` in the run folder (durable there as
on one host: `loadgate report` decodes them after a crash) and, after the phase, decodes them into
records that name their actor and node. At the level's end the offsets are read again and
`distributed.json` records, per level, each actor's node, offsets and what they are known within,
and any actor that was lost: `loadgate.verdict` judges from that file (an offset known worse than
`health.clock_offset_ms`, or part of the plan not sent, is INVALID, exit 30).

An actor that dies (its node lost, killed) stops the level: the other actors start nothing more, what
everyone streamed is kept, and no further level runs. Losing the cluster itself is an engine failure
(exit 3).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import socket
from collections.abc import Callable
from pathlib import Path
from time import perf_counter_ns
from typing import Any

import orjson

from loadgate.analysis.distributed import DISTRIBUTED_FILE, read_distributed
from loadgate.config.profile import Distributed, Profile
from loadgate.core.clocks import Offset, read_offset, uncertainty_ns, wall_ns
from loadgate.errors import EngineError, UsageError
from loadgate.jsonutil import dump_json
from loadgate.load.exchanges import read as read_log
from loadgate.load.executors import Concurrency, StopFlag
from loadgate.load.plan import Plan
from loadgate.load.recorder import exchange_record
from loadgate.load.target import TargetSpec, decode
from loadgate.load.workers import Phase
from loadgate.load.workload.dataset import Prepared
from loadgate.records import STEAL_TRUSTED, RecordWriter

POLL_S = 0.25
CALL_S = 60.0  # an actor (or the counter) that does not answer a poll within this: the cluster is lost (exit 3)
READY_S = 180.0  # ... nor says it is ready (its workers build the phase's bodies) within this
START_AFTER_NS = 300_000_000  # every actor is ready: the phase starts this long after, on the driver's clock


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise UsageError("load.distributed: backend ray needs Ray: pip install 'loadgate[ray]'") from None
    return ray


def refuse_literal_secrets(profile: Profile) -> None:
    """Actors get the profile as written, through Ray (its object store keeps what it carries): a key
    written in it as a literal would travel; `${NAME}` (read on each node) or `api_key_env` does not."""
    from loadgate.secrets import holds_literal_secret

    sides = [("target", profile.target)] + ([("ab.baseline", profile.ab.baseline)] if profile.ab is not None else [])
    for where, target in sides:
        for name, value in target.headers.items():
            if holds_literal_secret(name, value):
                raise UsageError(f"{where}.headers.{name}: under load.distributed write the credential as ${{NAME}} "
                                 "(each node reads it from its environment) or use api_key_env: a literal would "
                                 "travel through Ray")


def connect(cfg: Distributed) -> None:
    """Join the Ray cluster (once per process) and check that it can hold the actors: before anything
    starts. An address nothing answers at is an engine failure (exit 3); too few CPUs, a usage error."""
    ray = _ray()
    if not ray.is_initialized():
        _reachable(cfg.address)
        try:
            ray.init(address=cfg.address, logging_level="ERROR", log_to_driver=False,
                     configure_logging=True, include_dashboard=False)
        except (ConnectionError, RuntimeError, ValueError, TimeoutError) as e:
            raise EngineError(f"load.distributed.address: no Ray cluster at {cfg.address}: {_first_line(e)}") \
                from None
    cpus = float(ray.cluster_resources().get("CPU", 0))
    need = cfg.actors * cfg.per_actor.cpus
    if need > cpus:
        raise UsageError(f"load.distributed: {cfg.actors} actors x {cfg.per_actor.cpus:g} CPU need {need:g} CPUs; "
                         f"the Ray cluster at {cfg.address} has {cpus:g}")


def _reachable(address: str, timeout_s: float = 5.0) -> None:
    """A TCP connection to host:port (Ray's own connect retries for minutes): EngineError at once
    where nothing listens. `auto` is Ray's to find."""
    if address == "auto":
        return
    host, _, port = address.removeprefix("ray://").rpartition(":")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as e:
        raise EngineError(f"load.distributed.address: no Ray cluster at {address}: {e.strerror or e}") from None


async def _answer(aw: Any, timeout_s: float) -> Any:
    """`aw` awaited, or EngineError once `timeout_s` passed (a cluster that went away does not answer,
    and Ray would wait on it)."""
    ray = _ray()
    try:
        return await asyncio.wait_for(aw, timeout_s)
    except ray.exceptions.RayError as e:
        raise EngineError(f"load.distributed: the Ray cluster failed a call: {_first_line(e)}") from None
    except TimeoutError:
        raise EngineError(f"load.distributed: the Ray cluster stopped answering (no reply in {timeout_s:g} s)") \
            from None


def _call(ref: Any, timeout_s: float | None = 120.0) -> Any:
    ray = _ray()
    try:
        return ray.get(ref, timeout=timeout_s)
    except (ray.exceptions.GetTimeoutError, ray.exceptions.RaySystemError) as e:  # (a dead actor: its caller's)
        raise EngineError(f"load.distributed: the Ray cluster stopped answering: {type(e).__name__}") from None


class RayGroup:
    """One level's actors (see the module docstring); `run` is `WorkerGroup.run`'s counterpart."""

    def __init__(self, spec: TargetSpec, profile: Profile, pool: list[int], run_dir: Path, stop_flag: StopFlag,
                 round_: int, dataset: Prepared | None, plan: Plan, level: str) -> None:
        from loadgate.load.ray_actor import IndexCounter, LoadActor

        ray = _ray()
        cfg = profile.load.distributed
        assert cfg is not None
        self.cfg, self.spec, self.run_dir, self.stop_flag, self.plan = cfg, spec, run_dir, stop_flag, plan
        self.level, self.workers = level, profile.load.workers
        self.lost: list[dict[str, Any]] = []
        # the driver's secrets stay here: each node reads its own (`ray_actor.node_env_spec`)
        bare = dataclasses.replace(spec, headers={}, extra_body={}, secrets=())
        self.counter = ray.remote(IndexCounter).options(num_cpus=0).remote()
        remote = ray.remote(LoadActor).options(num_cpus=cfg.per_actor.cpus, max_restarts=0,
                                                scheduling_strategy="SPREAD")
        self.actors = [remote.remote(a, cfg.actors, self.workers, bare, profile, pool, round_, dataset, self.counter)
                       for a in range(cfg.actors)]
        try:
            self.info = [_call(a.info.remote()) for a in self.actors]
        except ray.exceptions.RayActorError as e:
            raise EngineError(f"load.distributed: an actor did not start: {_first_line(e)}") from None
        for info in self.info:
            if info.get("error"):  # its node lacked what the run needs (an environment variable)
                kind, message = info["error"]
                where = f"load.distributed: actor {info['actor']} on node {info['node'][:12]} ({info['ip']})"
                cls = UsageError if kind in ("UsageError", "ProfileError") else EngineError
                self._kill()
                raise cls(f"{where}: {message}")
        self.start_offsets = [self._offset(a) for a in self.actors]
        self.end_offsets: list[Offset | None] = [None] * len(self.actors)
        self._write()

    def _offset(self, actor: Any) -> Offset:
        ray = _ray()
        try:
            return read_offset(lambda: int(_call(actor.clock.remote(), 30.0)))
        except ray.exceptions.RayError as e:
            raise EngineError(f"load.distributed: an actor did not answer its clock reading: {_first_line(e)}") \
                from None

    def _name(self, a: int) -> str:
        return f"actor {a} on node {self.info[a]['node'][:12]} ({self.info[a]['ip']})"

    async def run(self, phase: Phase, writer: RecordWriter,
                  on_progress: Callable[[int], None] | None = None) -> list[dict[str, Any]]:
        """Run one phase on every actor; the records of what they streamed go to `writer`'s file."""
        ray = _ray()
        if self.lost:
            return []
        if isinstance(phase.loop, Concurrency) and not phase.warmup and phase.ramp is None:
            end = phase.indices.start + len(self.plan.conversations) if self.plan.conversations else phase.indices.stop
            await _answer(self.counter.reset.remote(phase.indices.start, end), CALL_S)
        t0_wall = wall_ns() - (perf_counter_ns() - phase.t0_ns)
        live = list(range(len(self.actors)))
        offs = [o.offset_ns for o in self.start_offsets]
        files: dict[str, Path] = {}
        healths: dict[int, list[dict[str, Any]]] = {}
        try:
            if not await self._each(live, lambda a: self.actors[a].ready.remote(phase, t0_wall, offs[a])):
                return []  # an actor was lost before the phase began: nothing is sent (the verdict says why)
            start = wall_ns() + START_AFTER_NS
            if not await self._each(live, lambda a: self.actors[a].go.remote(start, offs[a])):
                live = [a for a in live if a not in {x["actor"] for x in self.lost}]
            done = [0] * len(self.actors)
            stopped = False
            while live:
                await asyncio.sleep(POLL_S)
                if self.stop_flag.is_set() and not stopped:
                    stopped = True
                    for a in live:
                        self.actors[a].stop.remote()
                polls = await _answer(asyncio.gather(*(self.actors[a].poll.remote() for a in live),
                                                     return_exceptions=True), CALL_S)
                for a, got in zip(list(live), polls, strict=True):
                    if isinstance(got, ray.exceptions.RayActorError):
                        self._lose(a, got, phase)
                        live.remove(a)
                        for b in live:  # the rest start nothing more: the level cannot be whole
                            self.actors[b].stop.remote()
                        stopped = True
                        continue
                    if isinstance(got, ray.exceptions.RayError):
                        raise EngineError(f"load.distributed: the Ray cluster stopped answering: {_first_line(got)}")
                    if isinstance(got, BaseException):
                        raise got
                    self._append(a, got["logs"], files)
                    if on_progress and got["done"] > done[a]:
                        on_progress(got["done"] - done[a])
                        done[a] = got["done"]
                    if got["abort"] and self.stop_flag.why is None:  # an actor's breaker tripped (load.abort)
                        with contextlib.suppress(OSError), open(self.run_dir / "abort.json", "x") as f:
                            f.write(orjson.dumps({"trigger": got["abort"]}).decode())
                        self.stop_flag.abort(got["abort"])
                    if got["finished"]:
                        if got["error"]:
                            raise EngineError(f"load.distributed: {self._name(a)}: {got['error']}")
                        healths[a] = got["health"] or []
                        live.remove(a)
        finally:
            self._decode(files, healths, writer)
        return [h for a in sorted(healths) for h in healths[a]]

    async def _each(self, which: list[int], call: Callable[[int], Any]) -> bool:
        """`call` on every actor in `which`; False when one was lost (recorded; the others told to stop)."""
        ray = _ray()
        got = await _answer(asyncio.gather(*(call(a) for a in which), return_exceptions=True), READY_S)
        whole = True
        for a, g in zip(which, got, strict=True):
            if isinstance(g, ray.exceptions.RayActorError):
                self._lose(a, g, None)
                whole = False
            elif isinstance(g, ray.exceptions.RayError):
                raise EngineError(f"load.distributed: {self._name(a)}: {_first_line(g)}")
            elif isinstance(g, BaseException):
                raise g
        if not whole:
            self.stop()
        return whole

    def _lose(self, a: int, e: BaseException, phase: Phase | None) -> None:
        self.lost.append({"actor": a, "node": self.info[a]["node"], "ip": self.info[a]["ip"],
                          "phase": None if phase is None else phase.run_tag, "why": _first_line(e)})
        self._write()

    def _append(self, a: int, logs: dict[str, bytes], files: dict[str, Path]) -> None:
        """The frames actor `a` relayed, appended to its logs in the run folder (`exchanges/`)."""
        for name, data in logs.items():
            path = files.get(f"{a}/{name}")
            if path is None:  # <the worker's log>.a<actor>.lgx: `<tag>-*.lgx` as on one host (abort_watch)
                path = self.run_dir / "exchanges" / f"{name.removesuffix('.lgx')}.a{a}.lgx"
                path.parent.mkdir(parents=True, exist_ok=True)
                files[f"{a}/{name}"] = path
            with open(path, "ab") as f:
                f.write(data)

    def _decode(self, files: dict[str, Path], healths: dict[int, list[dict[str, Any]]], writer: RecordWriter) -> None:
        """The streamed logs' records, each naming its actor and node (then the logs are removed).
        A worker's quiet-turn wakes are trusted where its host took little of the CPU (as on one host)."""
        from loadgate.engine.adapters import adapter_for

        adapter = adapter_for(self.spec.api)
        for key, path in sorted(files.items()):
            a_text, name = key.split("/", 1)
            a, j = int(a_text), _worker_of(name)
            h = healths.get(a) or []
            steal = h[j].get("host_steal_fraction") if j is not None and j < len(h) else None
            contents = read_log(path)
            if contents is None:
                continue
            m = contents.meta
            for x in contents.exchanges:
                d = decode(adapter, bool(m["stream"]), x.raw, int(m["max_event_bytes"]),
                           trust_wakes=steal is not None and steal <= STEAL_TRUSTED)
                rec = exchange_record(x, d, m.get("prompt_overhead"))
                writer.write(dataclasses.replace(rec, actor=a, node=self.info[a]["node"]))
            with contextlib.suppress(OSError):
                path.unlink()

    def _write(self) -> None:
        """This level's entry in distributed.json (the file keeps every level's)."""
        whole = read_distributed(self.run_dir) or {"backend": "ray", "address": self.cfg.address, "levels": {}}
        actors = []
        for a, info in enumerate(self.info):
            s, e = self.start_offsets[a] if a < len(self.start_offsets) else None, self.end_offsets[a]
            actors.append({**info,
                           "offset_start_ms": None if s is None else s.offset_ns / 1e6,
                           "rtt_start_ms": None if s is None else s.rtt_ns / 1e6,
                           "offset_end_ms": None if e is None else e.offset_ns / 1e6,
                           "rtt_end_ms": None if e is None else e.rtt_ns / 1e6,
                           "known_within_ms": None if s is None or e is None else uncertainty_ns(s, e) / 1e6})
        whole["levels"][self.level] = {"actors": actors, "workers_per_actor": self.workers, "lost": self.lost}
        dump_json(self.run_dir / DISTRIBUTED_FILE, whole)

    def stop(self) -> None:
        for a in self.actors:
            a.stop.remote()

    def close(self) -> None:
        ray = _ray()
        lost = {x["actor"] for x in self.lost}
        for a, actor in enumerate(self.actors):
            if a in lost:
                continue
            try:
                self.end_offsets[a] = self._offset(actor)
                _call(actor.close.remote(), 60.0)
            except (ray.exceptions.RayActorError, EngineError) as e:
                if a not in lost:
                    self.lost.append({"actor": a, "node": self.info[a]["node"], "ip": self.info[a]["ip"],
                                      "phase": None, "why": _first_line(e)})
        self._write()
        self._kill()

    def _kill(self) -> None:
        ray = _ray()
        for actor in [*self.actors, self.counter]:
            with contextlib.suppress(Exception):
                ray.kill(actor)


def _worker_of(name: str) -> int | None:
    """The local worker a relayed log came from: `<tag>-part-<tag>-<j>.lgx`."""
    tail = name.removesuffix(".lgx").rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else None


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return (text.splitlines()[0] if text else type(e).__name__)[:300]
