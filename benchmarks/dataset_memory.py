"""How much memory reading a dataset takes: a parquet file (streamed in record batches) and a
ShareGPT JSON file (one array, read whole), each written here with incompressible text.

    python benchmarks/dataset_memory.py [--rows 100000] [--row-bytes 2100] [--requests 100]

For each file it starts a fresh process that imports loadgate and pyarrow, notes its resident set,
checks every row and draws `--requests` rows as a run does (`workload.tokenizer: none`, so nothing
is counted) while a thread samples the resident set every 2 ms, and prints the peak's growth over
the start: in MiB, and per MiB of the file. `tests/load/test_dataset.py`
runs the parquet case (`measure`) and asserts its bound.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = r"""
import asyncio, os, sys, threading, time
from pathlib import Path
import pyarrow, pyarrow.parquet  # noqa: F401 - imported before the baseline, as a run has them
from loadgate.config.profile import Dataset, Distribution, Profile, Target, Workload
from loadgate.load.workload.dataset import open_rows, prepare
path, requests = Path(sys.argv[1]), int(sys.argv[2])
p = Profile(name="m", target=Target(endpoint="embedded", api="openai-chat"),
            workload=Workload(requests=requests, tokenizer="none", dataset=Dataset(path=str(path)),
                              output_len=Distribution(dist="fixed", value=16)))
page = os.sysconf("SC_PAGE_SIZE")
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * page
before, peak, done = rss(), [0], threading.Event()
def sample():  # the resident set every 2 ms (the peak of ru_maxrss would hide below the imports' peak)
    while not done.is_set():
        peak[0] = max(peak[0], rss())
        time.sleep(0.002)
t = threading.Thread(target=sample)
t.start()
rows = open_rows(p)
prepared = asyncio.run(prepare(p, rows, None))
done.set()
t.join()
print(len(rows), len(prepared), max(peak[0], rss()) - before)
"""


def _text(n: int) -> str:
    return base64.b64encode(os.urandom(n * 3 // 4 + 3)).decode()[:n]


def write_parquet(path: Path, rows: int, row_bytes: int, group: int = 10_000) -> Path:
    """`rows` rows of prompt (incompressible text of `row_bytes`) and category, uncompressed,
    written a row group at a time (the writer's memory stays one group)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema([("prompt", pa.string()), ("category", pa.string())])
    with pq.ParquetWriter(str(path), schema, compression="none") as w:
        for start in range(0, rows, group):
            n = min(group, rows - start)
            blob = _text(n * row_bytes)
            w.write_table(pa.table({"prompt": [blob[k * row_bytes:(k + 1) * row_bytes] for k in range(n)],
                                    "category": [f"c{(start + k) % 8}" for k in range(n)]}, schema=schema))
    return path


def write_sharegpt(path: Path, rows: int, row_bytes: int) -> Path:
    half = row_bytes // 2
    with open(path, "w") as f:
        f.write("[")
        for k in range(rows):
            turns = [{"from": "human", "value": _text(half)}, {"from": "gpt", "value": _text(half)}]
            f.write(("," if k else "") + json.dumps({"id": k, "conversations": turns}))
        f.write("]")
    return path


def measure(path: Path, requests: int) -> tuple[int, int, int]:
    """(rows, requests drawn, peak RSS growth in bytes) of reading `path` in a fresh process."""
    out = subprocess.run([sys.executable, "-c", CHILD, str(path), str(requests)], check=True,
                         capture_output=True, text=True, timeout=600).stdout.split()
    return int(out[0]), int(out[1]), int(out[2])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--row-bytes", type=int, default=2100)
    ap.add_argument("--requests", type=int, default=100)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for kind, write in (("parquet", write_parquet), ("sharegpt", write_sharegpt)):
            path = write(Path(tmp) / f"d.{'parquet' if kind == 'parquet' else 'json'}", a.rows, a.row_bytes)
            size = path.stat().st_size
            rows, drawn, grew = measure(path, a.requests)
            print(f"{kind:9s} {rows:,} rows, {size / 2**20:,.1f} MiB file: peak RSS +{grew / 2**20:,.1f} MiB "
                  f"({grew / size:.2f} MiB per MiB of file), {drawn} requests drawn")
            path.unlink()


if __name__ == "__main__":
    main()
