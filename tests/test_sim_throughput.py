"""The simulator keeps its step cadence with hundreds of concurrent streams, with the client in
another process (measured from the simulator's own ground-truth send times)."""

from __future__ import annotations

import statistics
import subprocess
import sys

import pytest

from loadgate.config.simconfig import SimConfig
from loadgate.sim.process import SimProcess

# A client that costs next to nothing: raw sockets, no parsing, waits for the chunked terminator.
CLIENT = r"""
import asyncio, sys
host, port, n, tokens = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
async def one(i):
    body = ('{"prompt": "stream %d", "max_tokens": %d, "temperature": 0, "ignore_eos": true, "stream": true}'
            % (i, tokens)).encode()
    r, w = await asyncio.open_connection(host, port)
    w.write(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    tail = b""
    while not tail.endswith(b"0\r\n\r\n"):
        data = await r.read(65536)
        if not data:
            break
        tail = (tail + data)[-16:]
    w.close()
async def main():
    await asyncio.gather(*(one(i) for i in range(n)))
asyncio.run(main())
"""


@pytest.mark.slow
@pytest.mark.timing
def test_256_streams_keep_10_ms_steps() -> None:
    cfg = SimConfig(fixed_step_us=10_000, max_num_seqs=256)
    with SimProcess(cfg) as sim:
        host, port = sim.url.removeprefix("http://").rsplit(":", 1)
        subprocess.run([sys.executable, "-c", CLIENT, host, port, "256", "60"], check=True, timeout=60)
        records = sim.truth_records()
    assert len(records) == 256
    gaps = []
    for r in records:
        times = [c["send_ns"] for c in r["chunks"] if c["kind"] == "tokens"]
        assert len(times) == 60
        gaps += [(b - a) / 1e6 for a, b in zip(times, times[1:], strict=False)]
    assert 9.0 < statistics.median(gaps) < 11.0
