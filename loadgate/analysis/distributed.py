"""A distributed run's own validity (`load.distributed`): from `distributed.json` and the records.

Per level and actor: its node, its records, its own stamp bound and (open loop) schedule lag, and its
clock's offset to the driver with what that is known within (`loadgate.core.clocks`). The run is
invalid (exit 30) when
- an actor was lost (its node died, it was killed) during the run: part of the plan was not sent; what
  it streamed before is kept, counted and named;
- an actor's clock offset is known worse than `health.clock_offset_ms`: the window, the throughput and
  an open loop's arrival times across hosts may be off by that much;
- an actor's own stamp bound or schedule lag is over its budget (one actor's lateness is not averaged
  away by the others').
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import orjson

from loadgate.records import Record

DISTRIBUTED_FILE = "distributed.json"  # written by loadgate.load.distributed, per level


def read_distributed(run_dir: Path) -> dict[str, Any] | None:
    """distributed.json, or None for a run from one host (or a damaged file: then nothing to judge)."""
    try:
        d = orjson.loads((run_dir / DISTRIBUTED_FILE).read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None
    return d if isinstance(d, dict) and isinstance(d.get("levels"), dict) else None


def _level_key(level: float | int | str) -> float:
    """A level as distributed.json's keys and the records' `level` both give it ("40.0", 40.0, "6", 6)."""
    return float(level)


def actor_figures(dist: dict[str, Any], records: list[Record]) -> dict[str, list[dict[str, Any]]]:
    """Per level, per actor: node, ip, records (measured), stamp bound p99, schedule lag p99, clock."""
    from loadgate.analysis.validity import schedule_lag, stamp_bound  # (numpy: not at import, which the
    # driver's load stage and the recorder do for `read_distributed`)
    mine: dict[tuple[float, int], list[Record]] = defaultdict(list)
    for r in records:
        if r.actor is not None and not r.excluded:
            mine[(_level_key(r.level), r.actor)].append(r)
    out: dict[str, list[dict[str, Any]]] = {}
    for level, entry in dist["levels"].items():
        rows = []
        for a in entry.get("actors") or []:
            recs = mine.get((_level_key(level), int(a["actor"])), [])
            sb = stamp_bound(recs, None)
            sl = schedule_lag(recs)
            rows.append({"actor": a["actor"], "node": a.get("node"), "ip": a.get("ip"), "records": len(recs),
                         "stamp_p99_ms": None if sb is None else sb["stated_p99_ms"],
                         "schedule_lag_p99_ms": None if sl is None else sl["p99"],
                         "offset_ms": a.get("offset_start_ms"), "known_within_ms": a.get("known_within_ms")})
        out[level] = rows
    return out


def problems(dist: dict[str, Any], records: list[Record], budgets: Any) -> list[str]:
    """Why the distributed run is invalid, each naming the actor and its node; empty when it is not."""
    out = []
    figures = actor_figures(dist, records)
    for level, entry in dist["levels"].items():
        for lost in entry.get("lost") or []:
            kept = sum(1 for r in records if r.actor == lost["actor"] and _level_key(r.level) == _level_key(level))
            out.append(f"part of the plan was not sent: level {level}: actor {lost['actor']} on "
                       f"node {str(lost.get('node'))[:12]} ({lost.get('ip')}) was lost ({lost.get('why')}); the "
                       f"{kept} records it streamed before are kept and counted")
        for row in figures.get(level, []):
            name = f"actor {row['actor']} on node {str(row['node'])[:12]} ({row['ip']})"
            within = row["known_within_ms"]
            if within is None and not any(x["actor"] == row["actor"] for x in entry.get("lost") or []):
                out.append(f"level {level}: {name}: its clock offset was not read at the level's end, so the "
                           "window across hosts is not bounded")
            elif within is not None and within > budgets.clock_offset_ms:
                out.append(f"level {level}: {name}: its clock's offset to the driver is known only within "
                           f"{within:.2f} ms (health.clock_offset_ms {budgets.clock_offset_ms:g}): the window, "
                           "throughput and arrival times across hosts may be off by that much (a clock stepped "
                           "or slewed during the level, or slow round trips to that node)")
            if row["stamp_p99_ms"] is not None and row["stamp_p99_ms"] > budgets.stamp_error_p99_ms:
                out.append(f"level {level}: {name}: its TTFT and ITL stamps may be off by up to "
                           f"{row['stamp_p99_ms']:.2f} ms at p99 (budget {budgets.stamp_error_p99_ms:g} ms): give "
                           "its node more cores per worker, or more actors")
            if row["schedule_lag_p99_ms"] is not None and row["schedule_lag_p99_ms"] > budgets.schedule_lag_p99_ms:
                out.append(f"level {level}: {name}: it started requests late (schedule lag p99 "
                           f"{row['schedule_lag_p99_ms']:.1f} ms, budget {budgets.schedule_lag_p99_ms:g} ms)")
    return out


def actor_lines(dist: dict[str, Any], records: list[Record]) -> list[str]:
    """One line per level and actor for the report."""
    out = []
    for level, rows in actor_figures(dist, records).items():
        for row in rows:
            sb = "n/a" if row["stamp_p99_ms"] is None else f"{row['stamp_p99_ms']:.2f} ms"
            sl = "" if row["schedule_lag_p99_ms"] is None else f", schedule lag p99 {row['schedule_lag_p99_ms']:.2f} ms"
            clock = "not read" if row["offset_ms"] is None else (
                f"{row['offset_ms']:+.3f} ms" + ("" if row["known_within_ms"] is None
                                                  else f" known within {row['known_within_ms']:.3f} ms"))
            out.append(f"actor {row['actor']} (level {level}) on node {str(row['node'])[:12]} ({row['ip']}): "
                       f"{row['records']} records, stamps p99 {sb}{sl}, clock offset to the driver {clock}")
    return out
