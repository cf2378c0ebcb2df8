"""Timing (CI's timing step): a distributed run's window throughput against the server's own count.

`benchmarks/event_source.py` streams every request on a known schedule and logs each event's send
time; an open loop of 150 requests at 50 per second from 3 Ray actors (tests/raycluster.py) must give
the output-token throughput the server's log gives over the same window (first measured request's
arrival to the last event sent) within 1 %: the actors' records, put on the driver's time line by
each node's offset, make one window."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from loadgate.cli import main
from loadgate.jsonutil import load_json
from tests.profiles import LAX_HEALTH

ROOT = Path(__file__).resolve().parents[2]
READY = "event source listening on "
TTFT_MS, STEP_MS, PER_CHUNK, OUTPUT = 50.0, 20.0, 3, 30

pytestmark = pytest.mark.timing


def test_the_window_throughput_of_three_actors_matches_the_servers_own_within_1_percent(
        cluster: Any, tmp_path: Path) -> None:
    truth = tmp_path / "truth"
    truth.mkdir()
    src = subprocess.Popen([sys.executable, str(ROOT / "benchmarks" / "event_source.py"), "--port", "0",
                            "--log-dir", str(truth), "--ttft-ms", str(TTFT_MS), "--step-ms", str(STEP_MS),
                            "--tokens-per-chunk", str(PER_CHUNK)], stdout=subprocess.PIPE, text=True)
    try:
        line = src.stdout.readline() if src.stdout else ""
        assert line.startswith(READY), line
        url = line[len(READY):].strip()
        doc = {"name": "t", "target": {"endpoint": url, "model": "m", "metrics_url": "http://127.0.0.1:9/metrics"},
               "workload": {"requests": 150, "tokenizer": "none", "input_len": {"dist": "fixed", "value": 8},
                            "output_len": {"dist": "fixed", "value": OUTPUT}},
               "load": {"rate": 50, "arrival": "constant", "warmup_requests": 3,
                        "distributed": {"address": cluster.address, "actors": 3}},
               "health": {**LAX_HEALTH, "clock_offset_ms": 1e9},
               "output": {"dir": str(tmp_path / "out"), "run_id": "r"}}
        p = tmp_path / "p.yaml"
        p.write_text(yaml.safe_dump(doc))
        assert main(["run", "--unverified", "-q", str(p)]) == 11
    finally:
        src.send_signal(signal.SIGTERM)
        src.wait(30)
        if src.stdout:
            src.stdout.close()
    level = load_json(tmp_path / "out" / "r" / "summary.json")["levels"]["50.0"]
    measured = [json.loads(x) for f in truth.glob("truth-*.jsonl") for x in f.read_text().splitlines()]
    measured = [d for d in measured if "-L50.0-" in d["request_id"]]  # not the warmup's (…-L50.0w-…)
    assert len(measured) == 150 and level["requests"] == 150
    tokens = sum(len(d["send_ns"]) for d in measured) * PER_CHUNK
    start = min(d["send_ns"][0] for d in measured) - int(TTFT_MS * 1e6)  # the first one's arrival
    end = max(d["send_ns"][-1] for d in measured)
    server = tokens / ((end - start) / 1e9)
    ours = level["throughput"]["output_token_throughput"]
    assert abs(ours / server - 1) < 0.01, (ours, server, level["throughput"]["window_s"], (end - start) / 1e9)
