"""The embedded engine started before the command imports anything (`loadgate.sim.early`): the child
reads the profile itself, is handed over only when its settings are exactly the profile's, and stops
itself when the command that started it is gone."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import yaml

from loadgate.config.profile import load_profile
from loadgate.config.simconfig import SimConfig
from loadgate.sim import early
from loadgate.sim.process import take_prestarted
from tests.fixtures_path import REPO


def _profile(tmp_path: Path, endpoint: str = "embedded", k: int = 3) -> Path:
    doc = yaml.safe_load((REPO / "profiles" / "quickstart.yaml").read_text())
    doc["target"]["endpoint"] = endpoint
    doc["target"]["sim"]["speculative"]["k"] = k
    doc["exactness"]["corpus"] = str(REPO / "workloads" / "reference.jsonl")
    p = tmp_path / "p.yaml"
    p.write_text(yaml.safe_dump(doc))
    return p


def _gone(pid: int, within: float = 30.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                return True  # exited; whoever adopted it has not reaped it yet
        except (ProcessLookupError, FileNotFoundError):
            return True
        try:  # our own child: reap it, or it stays a zombie that kill(0) still finds
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return True
        except ChildProcessError:
            pass
        time.sleep(0.05)
    return False


def test_a_child_started_for_a_profile_is_handed_over_with_the_profiles_settings(tmp_path):
    p = _profile(tmp_path)
    early.spawn_for_profile(str(p))
    try:
        sim = take_prestarted(load_profile(str(p)).target.sim)
        assert sim is not None and not early.EARLY
        sim.wait()
        with urllib.request.urlopen(sim.url + "/v1/models", timeout=10) as r:
            assert r.status == 200
        sim.stop()
    finally:
        early.stop_all()


def _refused_once(tmp_path: Path) -> tuple[Path, int]:
    """An early child for a profile with k=3 speculation, asked for once with the defaults."""
    p = _profile(tmp_path, k=3)
    early.spawn_for_profile(str(p))
    pid = early.EARLY[0].proc.pid
    assert take_prestarted(SimConfig()) is None
    return p, pid


def test_a_child_whose_settings_differ_is_not_handed_over_and_waits_for_its_own_taker(tmp_path):
    """An A/B run opens its baseline's engine first: the candidate's early child must survive that."""
    p, pid = _refused_once(tmp_path)
    try:
        assert [c.proc.pid for c in early.EARLY] == [pid]
        sim = take_prestarted(load_profile(str(p)).target.sim)
        assert sim is not None and sim.pid == pid and not early.EARLY
        sim.stop()
        assert _gone(pid)
    finally:
        early.stop_all()


def test_an_early_child_nobody_takes_is_stopped_with_the_command(tmp_path):
    _, pid = _refused_once(tmp_path)
    early.stop_all()
    assert not early.EARLY and _gone(pid)


def test_a_profile_of_another_engine_starts_nothing_that_stays(tmp_path):
    p = _profile(tmp_path, endpoint="http://127.0.0.1:9")
    early.spawn_for_profile(str(p))
    child = early.EARLY[0]
    assert child.proc.wait(30) == 0 and child.proc.stdout.read() == b""  # no word: loading the profile reports
    assert take_prestarted(load_profile(str(p)).target.sim) is None


def test_the_child_stops_itself_when_the_command_that_started_it_dies(tmp_path):
    """A command killed before it hands the child over (here with SIGKILL, as the OOM killer would)
    leaves no simulator behind."""
    p = _profile(tmp_path)
    code = ("import sys, os; import loadgate.sim.early as e; "
            f"e.spawn_for_profile({str(p)!r}); c = e.EARLY[0].proc; "
            "line = c.stdout.readline(); print(c.pid, line[:20], flush=True); os.kill(os.getpid(), 9)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO).stdout.split()
    pid = int(out[0])
    assert "config" in " ".join(out[1:])  # it had read the profile and was starting up
    assert _gone(pid), f"simulator {pid} outlived the command that started it"
