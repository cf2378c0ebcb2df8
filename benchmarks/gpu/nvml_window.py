"""NVML read for real on a GPU host, through loadgate's reader (`loadgate.net.nvml`): readings every
0.5 s over a window of GPU work (bf16 matrix products through PyTorch, WORK_S seconds) between
two idle spells, then the window's figures (`loadgate.core.gpu.window_figures`): utilisation,
memory, power, the energy counter's rise against power integrated, and this process's GPU memory.

    python benchmarks/gpu/nvml_window.py [--work-s 30] [--json OUT.json]

Prints the figures and, with --json, writes every reading. The readings run in a thread here (this
script measures the GPU, not a client's stamps)."""

from __future__ import annotations

import argparse
import json
import os
import threading
import time

from loadgate.core.gpu import GpuReading, window_figures
from loadgate.net.nvml import open_nvml


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work-s", type=float, default=30.0)
    ap.add_argument("--idle-s", type=float, default=3.0)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    nvml, why = open_nvml()
    if nvml is None:
        raise SystemExit(f"no NVML: {why}")
    readings: list[GpuReading] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            readings.extend(nvml.read())
            stop.wait(0.5)

    import torch

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    time.sleep(a.idle_s)
    x = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    torch.cuda.synchronize()
    start = time.perf_counter_ns()
    products = 0
    while time.perf_counter_ns() - start < a.work_s * 1e9:
        for _ in range(20):
            y = x @ x
        torch.cuda.synchronize()
        products += 20
    end = time.perf_counter_ns()
    del y
    time.sleep(a.idle_s)
    stop.set()
    t.join()
    nvml.close()
    fig = window_figures(readings, start, end, output_tokens=None)
    flops = products * 2 * 8192 ** 3
    print(json.dumps({"pid": os.getpid(), "work_s": (end - start) / 1e9, "products": products,
                      "tflops": flops / ((end - start) / 1e9) / 1e12, "readings": len(readings),
                      "figures": fig}, indent=1, default=str))
    gpu0 = [r for r in readings if r.gpu == "0"]
    print("first reading:", json.dumps(gpu0[0].to_json()))
    print("absent:", {k: v for r in gpu0 for k, v in r.absent.items()})
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"figures": fig, "readings": [r.to_json() for r in readings]}, f)


if __name__ == "__main__":
    main()
