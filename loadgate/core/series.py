"""The server's `/metrics` as a time series: the run folder's `server-metrics.jsonl.gz`, written by
the scraper process (`loadgate.net.scraper`) and read back here without the network.

Gzip-compressed JSON lines. The first line is the header:
  {"series": 1, "clock": "perf_counter_ns", "interval_s": 0.5, "sources": {"server": URL, ...}}
`clock`: the times are `time.perf_counter_ns()` (CLOCK_MONOTONIC on Linux: one system-wide clock),
the clock of the records' stamps and of meta.json's `t0_ns`, so a scrape at `t` lies `t - t0_ns`
into the run, on the records' time axis. Every other line is one of:
  {"t": NS, "s": SOURCE, "n": [[ID, NAME, [[LABEL, VALUE], ...]], ...], "v": [[ID, X], ...], "x": [ID, ...]}
      one scrape of one source: `n` interns the series first seen in it (ids count from 0 over the
      whole file, so a name and its labels are written once), `v` the values that changed since the
      source's previous scrape (all of them in its first), `x` the series its previous scrape had
      and this one has not; empty keys are left out. A value that is not finite is the string
      "+Inf" or "-Inf"; a NaN sample says nothing and is left out (as `snapshot.parse_metrics` does).
  {"t": NS, "s": SOURCE, "error": WHY}      a scrape that failed (`WHY`: `unreachable`, `not_prometheus`)
  {"t": NS, "mark": "begin"|"end", "level": LEVEL}   a level's measured window begins or ends
  {"t": NS, "capped": BYTES}                the file reached its cap: nothing more was kept
A file cut short (the process killed) reads up to its last whole line.
"""

from __future__ import annotations

import gzip
import math
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import orjson

from loadgate.snapshot import LabelKey, Snapshot

SERIES_FILE = "server-metrics.jsonl.gz"
SERIES_FORMAT = 1
_FLUSH_EVERY = 64  # scrape lines between sync flushes (the size on disk is then known exactly)
_TRAILER = 1024  # the capped line, the last flush and gzip's trailer: at most this beyond the cap

Key = tuple[str, LabelKey]


def _enc(v: float) -> float | str:
    return v if math.isfinite(v) else ("+Inf" if v > 0 else "-Inf")


def _dec(v: float | str) -> float:
    return float(v)


class SeriesWriter:
    """Writes the series file (see the module docstring); `max_bytes`: the compressed file stays
    within it plus `_TRAILER` bytes, and once a line would pass it nothing more is kept (`capped`).

    The gzip stream is written with zlib directly, so that near the cap a line's compressed size
    can be known before it is kept (a copy of the compressor compresses it and flushes)."""

    def __init__(self, path: Path, sources: dict[str, str], interval_s: float, max_bytes: int) -> None:
        self.path, self.max_bytes = path, max_bytes
        self._raw: IO[bytes] = open(path, "wb")  # noqa: SIM115 - closed by close()
        self._z = zlib.compressobj(6, zlib.DEFLATED, 31)  # wbits 31: a gzip header and trailer
        self._size = 0  # bytes on disk
        self._ids: dict[Key, int] = {}
        self._last: dict[str, dict[int, float]] = {}
        self._pending = 0  # uncompressed bytes since the last sync flush (their compressed size is at most this + 1 %)
        self._lines = 0
        self.capped: int | None = None  # the size on disk when the cap was reached
        self._write({"series": SERIES_FORMAT, "clock": "perf_counter_ns", "interval_s": interval_s,
                     "sources": sources})

    def _out(self, data: bytes) -> None:
        self._raw.write(data)
        self._size += len(data)

    def _flush(self) -> None:
        self._out(self._z.flush(zlib.Z_SYNC_FLUSH))
        self._raw.flush()
        self._pending = 0

    def _fits(self, line: bytes) -> bool:
        """Whether the file, with `line` kept and flushed, stays within the cap."""
        if self._size + 2 * (self._pending + len(line)) + 64 <= self.max_bytes:  # deflate never doubles
            return True
        trial = self._z.copy()
        grown = len(trial.compress(line)) + len(trial.flush(zlib.Z_SYNC_FLUSH))
        return self._size + grown <= self.max_bytes

    def _write(self, obj: dict[str, Any]) -> bool:
        if self.capped is not None:
            return False
        line = orjson.dumps(obj) + b"\n"
        if not self._fits(line):
            self._flush()
            self.capped = self._size
            self._out(self._z.compress(orjson.dumps({"t": obj.get("t"), "capped": self.capped}) + b"\n"))
            return False
        self._out(self._z.compress(line))
        self._pending += len(line)
        self._lines += 1
        if self._lines % _FLUSH_EVERY == 0:
            self._flush()
        return True

    def scrape(self, t_ns: int, source: str, snap: Snapshot) -> bool:
        """One scrape of `source`; False once the file is capped."""
        if self.capped is not None:
            return False
        new: list[list[Any]] = []
        now: dict[int, float] = {}
        for key, v in snap.values.items():
            i = self._ids.get(key)
            if i is None:
                i = self._ids[key] = len(self._ids)
                new.append([i, key[0], [list(kv) for kv in key[1]]])
            now[i] = v
        before = self._last.get(source, {})
        line: dict[str, Any] = {"t": t_ns, "s": source}
        if new:
            line["n"] = new
        changed = [[i, _enc(v)] for i, v in now.items() if before.get(i) != v]
        if changed:
            line["v"] = changed
        gone = [i for i in before if i not in now]
        if gone:
            line["x"] = gone
        if not self._write(line):
            return False
        self._last[source] = now
        return True

    def failure(self, t_ns: int, source: str, why: str) -> None:
        self._write({"t": t_ns, "s": source, "error": why})

    def mark(self, t_ns: int, what: str, level: str) -> None:
        self._write({"t": t_ns, "mark": what, "level": level})

    def size(self) -> int:
        return self._size

    def close(self) -> int:
        """Close the file; its size in bytes."""
        self._out(self._z.flush(zlib.Z_FINISH))
        self._raw.close()
        return self._size


@dataclass
class Series:
    """A series file read back: each scrape whole again, in order."""

    header: dict[str, Any]
    scrapes: list[tuple[int, str, Snapshot]] = field(default_factory=list)
    failures: list[tuple[int, str, str]] = field(default_factory=list)
    marks: list[tuple[int, str, str]] = field(default_factory=list)
    capped: int | None = None

    def of(self, source: str) -> list[tuple[int, Snapshot]]:
        return [(t, s) for t, src, s in self.scrapes if src == source]


def _lines(path: Path) -> Iterator[dict[str, Any]]:
    with gzip.open(path, "rb") as f:
        try:
            for raw in f:
                if raw.endswith(b"\n"):
                    yield orjson.loads(raw)
        except (EOFError, gzip.BadGzipFile, zlib.error):  # cut short: the lines before it stand
            return


def read_series(path: Path) -> Series:
    """The series file at `path` (see the module docstring)."""
    lines = _lines(path)
    header = next(lines)
    out = Series(header)
    keys: dict[int, Key] = {}
    state: dict[str, dict[int, float]] = {}
    for d in lines:
        t = int(d["t"]) if d.get("t") is not None else 0
        if "capped" in d:
            out.capped = int(d["capped"])
        elif "mark" in d:
            out.marks.append((t, d["mark"], str(d["level"])))
        elif "error" in d:
            out.failures.append((t, d["s"], d["error"]))
        else:
            for i, name, labels in d.get("n", ()):
                keys[i] = (name, tuple((k, v) for k, v in labels))
            cur = state.setdefault(d["s"], {})
            for i in d.get("x", ()):
                del cur[i]
            for i, v in d.get("v", ()):
                cur[i] = _dec(v)
            out.scrapes.append((t, d["s"], Snapshot({keys[i]: v for i, v in cur.items()})))
    return out
