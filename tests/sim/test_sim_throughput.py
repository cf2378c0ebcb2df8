"""The simulator keeps its step cadence with a hundred and more concurrent streams, with the client
in another process (measured from the simulator's own ground-truth send times).

Its CPU cost per stream and step is asserted as measured. The cadence's limit allows for the time
the hypervisor took from this VM during the run (`tests.machine.Steal`): at ~27-40 % steal, seen here
while every version of the simulator missed its steps alike, no program keeps 10 ms steps."""

from __future__ import annotations

import statistics
import subprocess
import sys

import pytest

from loadgate.config.simconfig import SimConfig
from loadgate.sim.process import SimProcess
from tests.machine import Steal, process_cpu_s

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


STREAMS, TOKENS = 160, 60
# Measured here: ~35 us of simulator CPU per stream and step at 128-192 streams (its HTTP handling
# included); the budget is near twice that, so only a real regression in the simulator's hot path
# trips it.
CPU_US_PER_STREAM_STEP = 70


@pytest.mark.slow
@pytest.mark.timing
def test_160_streams_keep_10_ms_steps() -> None:
    cfg = SimConfig(fixed_step_us=10_000, max_num_seqs=STREAMS)
    with SimProcess(cfg) as sim:
        assert sim.pid is not None
        host, port = sim.url.removeprefix("http://").rsplit(":", 1)
        cpu0 = process_cpu_s(sim.pid)
        with Steal() as steal:
            subprocess.run([sys.executable, "-c", CLIENT, host, port, str(STREAMS), str(TOKENS)],
                           check=True, timeout=60)
        cpu = process_cpu_s(sim.pid) - cpu0
        records = sim.truth_records()
    assert len(records) == STREAMS
    gaps = []
    for r in records:
        times = [c["send_ns"] for c in r["chunks"] if c["kind"] == "tokens"]
        assert len(times) == TOKENS
        gaps += [(b - a) / 1e6 for a, b in zip(times, times[1:], strict=False)]
    us_per = cpu * 1e6 / (STREAMS * TOKENS)
    assert us_per < CPU_US_PER_STREAM_STEP, f"simulator CPU {us_per:.0f} us per stream and step"
    # Where the hypervisor took part of the machine, a step gets that much less of the CPU: the
    # cadence's upper limit stretches by the same share (10 ms steps need 1 - steal of the time).
    upper = 11.0 / (1.0 - min(steal.fraction, 0.5)) if steal.fraction > 0.05 else 11.0
    median = statistics.median(gaps)
    assert 9.0 < median < upper, (f"median step gap {median:.2f} ms (limit {upper:.1f} ms; the hypervisor "
                                  f"took {steal.fraction:.0%} of the CPU)")
