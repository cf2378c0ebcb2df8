"""The engine scripts' own helpers that need no engine (`scripts/engines/common.py`)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts" / "engines"))
import common  # noqa: E402


@pytest.mark.skipif(not hasattr(os, "SCHED_IDLE"), reason="no SCHED_IDLE on this OS")
def test_the_process_named_like_an_engine_core_under_a_server_is_put_on_sched_idle_and_no_other():
    """A server's child that names itself as vLLM's engine core does (prctl PR_SET_NAME, 15 bytes)
    goes to SCHED_IDLE, every thread of it; its sibling keeps its policy; a name nobody has finds none."""
    child = ("import ctypes, threading, time\n"
             "ctypes.CDLL(None).prctl(15, b'{name}', 0, 0, 0)\n"
             "threading.Thread(target=time.sleep, args=(30,), daemon=True).start()\n"
             "print('ready', flush=True)\n"
             "time.sleep(30)\n")
    server = subprocess.Popen([sys.executable, "-c",
                               "import subprocess, sys, time\n"
                               f"a = subprocess.Popen([sys.executable, '-c', {child.format(name='VLLM::EngineCor')!r}])\n"
                               f"b = subprocess.Popen([sys.executable, '-c', {child.format(name='VLLM::Worker')!r}])\n"
                               "time.sleep(30)\n"], stdout=subprocess.DEVNULL)
    try:
        found: list[int] = []
        for _ in range(100):  # (the children name themselves once started)
            names = {int(p): Path(f"/proc/{p}/comm").read_text().strip() for p in common._children(server.pid)}
            if sorted(names.values()) == ["VLLM::EngineCor", "VLLM::Worker"] and all(
                    len(os.listdir(f"/proc/{p}/task")) >= 2 for p in names):
                found = common.idle_policy_for(server.pid, "VLLM::EngineCor")
                break
            time.sleep(0.1)
        core = [p for p, n in names.items() if n == "VLLM::EngineCor"]
        assert found == core and len(core) == 1
        for tid in os.listdir(f"/proc/{core[0]}/task"):
            assert os.sched_getscheduler(int(tid)) == os.SCHED_IDLE
        worker = next(p for p, n in names.items() if n == "VLLM::Worker")
        assert os.sched_getscheduler(worker) == os.SCHED_OTHER
        assert common.idle_policy_for(server.pid, "nobody-has-this") == []
    finally:
        for p in common._children(server.pid):
            os.kill(p, 9)
        server.kill()
        server.wait()
