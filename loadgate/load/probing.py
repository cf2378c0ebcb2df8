"""The capacity search's probes run as load levels (docs/capacity.md): after each level the
prober reads that level's records back, summarizes them, judges the profile's thresholds on the
summary and asks `loadgate.analysis.search.next_load` for the next probe."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from loadgate.analysis.search import Probe, next_load
from loadgate.analysis.summary import level_summary
from loadgate.config.profile import Profile, Search
from loadgate.core.thresholds import evaluate_all, parse_all
from loadgate.documents import HealthPhase, ServerLevel
from loadgate.load.executors import Concurrency, LoadLevel, Rate
from loadgate.records import read_records


def probe_level(profile: Profile, load: float) -> LoadLevel:
    """The level that probes `load`: a closed loop of that many in flight, or an open loop at that rate."""
    search = profile.load.search
    assert search is not None
    return Concurrency(int(load)) if search.over == "concurrency" else Rate(load, profile.load.max_in_flight)


class Prober:
    """`run_levels`' `next_level` for a search; `probes` holds each probe's load and verdict in order."""

    def __init__(self, profile: Profile, records: Path, cpus: dict[str, Any] | None) -> None:
        assert profile.load.search is not None
        self.profile, self.search, self.records, self.cpus = profile, profile.load.search, records, cpus
        self.profile_json = profile.to_json()
        self.thresholds = parse_all(profile.threshold_texts())
        self.probes: list[Probe] = []

    def __call__(self, loop: LoadLevel, server: ServerLevel, health: list[HealthPhase]) -> LoadLevel | None:
        key = str(loop.level)
        recs = [r for r in read_records(self.records) if str(r.level) == key]
        summary = level_summary(recs, server, health, self.profile_json, self.cpus)
        passed = all(o.passed for o in evaluate_all(self.thresholds, summary))
        self.probes.append(Probe(float(loop.level), passed))
        following = next_load(self.search, self.probes)
        return None if following is None else probe_level(self.profile, following)


def probes_expected(search: Search) -> int:
    """About how many probes a search runs (for the progress bar): doublings, then bisections."""
    return 1 + _log2_ceil(search.hi / search.lo) + _log2_ceil(1 / search.resolution)


def _log2_ceil(x: float) -> int:
    n = 0
    while 2 ** n < x:
        n += 1
    return n
