"""A run's GPU figures per level, from the readings the run folder keeps (`gpu.jsonl`, written by
`loadgate.load.gpu` through `loadgate.net.nvml.record`): the level's measured window cut out of
them (`loadgate.core.gpu.window_figures`), joules per output token over the window's successful
requests, and what the file says of itself (source, why there were no readings, whether the size
cap stopped them, the reader's CPU time)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from loadgate.core.gpu import GpuReading, from_dcgm, window_figures
from loadgate.core.series import SERIES_FILE, read_series
from loadgate.records import Record

GPU_FILE = "gpu.jsonl"


def read_gpu_file(run_dir: Path) -> tuple[dict[str, Any], list[GpuReading], dict[str, Any]] | None:
    """(the file's first line, its readings, its end line — empty if the reader did not finish), or
    None without a file. A damaged line (the run was killed mid-write) ends the readings."""
    path = run_dir / GPU_FILE
    if not path.exists():
        return None
    head: dict[str, Any] = {}
    readings: list[GpuReading] = []
    end: dict[str, Any] = {}
    with open(path, "rb") as f:
        for n, line in enumerate(f):
            try:
                d = orjson.loads(line)
            except orjson.JSONDecodeError:
                break
            if n == 0:
                head = d
            elif "end" in d:
                end = d["end"]
            else:
                try:
                    readings.append(GpuReading.from_json(d))
                except (KeyError, TypeError, ValueError):
                    break
    return head, readings, end


def dcgm_from_series(run_dir: Path, profile: dict[str, Any]) -> tuple[dict[str, Any], list[GpuReading],
                                                                       dict[str, Any]] | None:
    """GPU readings from a DCGM exporter scraped as one of `target.extra_metrics_urls` (the server
    metrics series, `loadgate.core.series`): every scrape of an extra source that holds DCGM metrics,
    read as `loadgate.core.gpu.from_dcgm` does, at its scrape time; None where no extra source did."""
    if not (profile.get("target") or {}).get("extra_metrics_urls") or not (run_dir / SERIES_FILE).exists():
        return None
    series = read_series(run_dir / SERIES_FILE)
    readings = [r for t, src, snap in series.scrapes if src != "server" for r in from_dcgm(snap, t)]
    if not readings:
        return None
    urls = [series.header["sources"][src] for src in series.header["sources"] if src != "server"]
    return ({"source": "dcgm", "absent": None, "interval_s": series.header.get("interval_s"), "urls": urls},
            readings, {})


def level_gpu(gpu: tuple[dict[str, Any], list[GpuReading], dict[str, Any]] | None, t0_ns: int | None,
              records: list[Record]) -> dict[str, Any] | None:
    """One level's GPU figures (None where the run read no GPU): `source`, `absent` (why there are no
    readings), `capped`, `reader_cpu_s`, and `window_figures` over the level's measured window
    [first origin, last end] of its measured requests, with its successful requests' output tokens."""
    if gpu is None:
        return None
    head, readings, end = gpu
    out: dict[str, Any] = {"source": head.get("source"), "absent": head.get("absent"),
                           "capped": bool(end.get("capped")), "reader_cpu_s": end.get("cpu_s"),
                           "interval_s": head.get("interval_s"), "urls": head.get("urls")}
    measured = [r for r in records if not r.warmup]
    if not readings or not measured or t0_ns is None:
        return {**out, "window": None}
    start = t0_ns + min(r.origin_ns for r in measured)
    stop = t0_ns + max(r.end_ns for r in measured)
    tokens = sum(sum(r.chunk_tokens) for r in measured if r.succeeded)
    return {**out, "window": window_figures(readings, start, stop, tokens)}
