"""A Prometheus `/metrics` snapshot: parsed (prometheus_client's text parser), summed by labels,
and compared. Pure data, beside the records: the analysis stage reads snapshots written into a run
folder without importing the network (`loadgate.net.scrape` scrapes them).

A `Snapshot` maps (sample name, sorted labels) to a value. Counter deltas between two snapshots
taken at the measured window's boundaries give what the server did during the window. Which names
to read is each engine family's (`loadgate.engine.adapters`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

LabelKey = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Snapshot:
    values: dict[tuple[str, LabelKey], float]

    def total(self, name: str, **match: str) -> float | None:
        """Sum of every sample called `name` whose labels include `match`; None when absent."""
        hits = [v for (n, labels), v in self.values.items()
                if n == name and all(dict(labels).get(k) == val for k, val in match.items())]
        return sum(hits) if hits else None

    def by_label(self, name: str, label: str) -> dict[str, float]:
        out: dict[str, float] = {}
        for (n, labels), v in self.values.items():
            d = dict(labels)
            if n == name and label in d:
                out[d[label]] = out.get(d[label], 0.0) + v
        return out


def parse_metrics(text: str) -> Snapshot:
    """Parse Prometheus text exposition into a Snapshot (counter samples keep their `_total`).
    A NaN sample (SGLang's `sglang:fwd_occupancy` on CPU) says nothing and is left out."""
    from prometheus_client.parser import text_string_to_metric_families

    values: dict[tuple[str, LabelKey], float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            v = float(s.value)
            if not math.isnan(v):
                values[(s.name, tuple(sorted(s.labels.items())))] = v
    return Snapshot(values)


def delta(before: Snapshot, after: Snapshot, name: str, **match: str) -> float | None:
    a, b = after.total(name, **match), before.total(name, **match)
    if a is None:
        return None
    return a - (b or 0.0)


def first_name(snap: Snapshot, candidates: Iterable[str]) -> str | None:
    names = {n for n, _ in snap.values}
    return next((c for c in candidates if c in names), None)


def snapshot_from_json(values: list[list[Any]]) -> Snapshot:
    """server.json's samples; a null (a NaN gauge, written by versions that kept it) is left out."""
    return Snapshot({(name, tuple((k, v) for k, v in labels)): float(val) for name, labels, val in values
                     if val is not None})


def snapshot_to_json(s: Snapshot, prefixes: tuple[str, ...]) -> list[list[Any]]:
    """The samples whose names begin with one of `prefixes` (the engine families', for server.json)."""
    return [[n, [list(kv) for kv in labels], v] for (n, labels), v in s.values.items() if n.startswith(prefixes)]
