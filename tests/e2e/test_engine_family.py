"""An engine family is one file: `tests/data/engine_family/acme.py` declares a made-up engine
("Acme": the OpenAI-compatible routes, vLLM's metric names, played by the simulator), and
loadgate's check and run work through it, with no other module told about it. This runs
docs/contributing.md's "Add an engine" recipe as written: the file dropped into
`loadgate/engine/adapters/` of a copy of the package."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from loadgate.config.profile import load_profile
from loadgate.engine import adapters
from loadgate.errors import ProfileError
from loadgate.jsonutil import load_json
from tests.fixtures_path import REPO
from tests.profiles import LAX_HEALTH, tiny_corpus

ACME = REPO / "tests" / "data" / "engine_family" / "acme.py"
RECIPES = REPO / "docs" / "contributing.md"
FAST = {"decode_step_us": 150, "decode_us_per_seq": 5, "prefill_us_per_token": 0.5}


def acme_module():
    spec = importlib.util.spec_from_file_location("acme_family", ACME)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def profile(tmp: Path, api: str) -> Path:
    doc = {
        "name": "acme",
        "target": {"endpoint": "embedded", "api": api,
                   "sim": {**FAST, "speculative": {"method": "draft_model", "k": 4}}},
        "workload": {"requests": 24, "input_len": {"dist": "fixed", "value": 32},
                     "output_len": {"dist": "fixed", "value": 16}},
        "load": {"concurrency": 4, "warmup_requests": 4},
        "exactness": {"baseline": "sim-reference", "contract": {"tier": "bit-exact"}, "corpus": str(tiny_corpus(tmp)),
                      "scenarios": {"solo": True, "concurrent": 4}},
        "health": LAX_HEALTH,
        "output": {"dir": str(tmp / "out"), "run_id": "r"},
    }
    path = tmp / "acme.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_a_family_registered_from_outside_is_a_target_api_and_names_its_metrics(tmp_path, monkeypatch):
    p = profile(tmp_path, "acme-completions")
    with pytest.raises(ProfileError, match=r"target\.api: expected one of 'openai-completions'.*got 'acme-completions'"):
        load_profile(p)
    monkeypatch.setattr(adapters, "ADAPTERS", dict(adapters.ADAPTERS))
    monkeypatch.setattr(adapters, "FAMILIES", dict(adapters.FAMILIES))
    mod = acme_module()
    adapters.register_module(mod)
    assert load_profile(p).target.api == "acme-completions"
    assert adapters.family_for("acme-completions") is mod.FAMILY  # the adapter names it: no metrics needed
    assert adapters.chat_api_for("acme-completions") == "acme-chat" and adapters.is_chat("acme-chat")
    assert adapters.identify({"acme_build": {"x": 1}}) is mod.FAMILY
    assert "acme_build" in [q.key for q in adapters.introspection()]
    with pytest.raises(ValueError, match="already registered"):
        adapters.register_module(mod)


def test_the_add_an_engine_recipe_one_file_gives_a_check_and_a_run(tmp_path):
    recipe = RECIPES.read_text().split("## Add an engine", 1)[1].split("\n## ", 1)[0]
    assert "`loadgate/engine/adapters/`" in recipe and "tests/data/engine_family/acme.py" in recipe
    site = tmp_path / "site"
    shutil.copytree(REPO / "loadgate", site / "loadgate", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ACME, site / "loadgate" / "engine" / "adapters" / "acme.py")  # the recipe's one step
    env = {**os.environ, "PYTHONPATH": str(site)}
    p = profile(tmp_path, "acme-completions")
    out = subprocess.run([sys.executable, "-m", "loadgate", "run", str(p), "--quiet"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    run = tmp_path / "out" / "r"
    fp = load_json(run / "fingerprint.json")["fingerprint"]
    assert "sim" in fp["engine"]["acme_build"]  # Acme's introspection route, answered by the simulator
    ex = load_json(run / "exactness.json")
    assert ex["speculation"]["ran"] and ex["speculation"]["counter_drafts_delta"] > 0  # Acme's counters
    summary = load_json(run / "summary.json")
    assert summary["api"] == "acme-completions"
    (level,) = summary["levels"].values()
    counters = level["acceptance"]["counters"]
    assert counters["engine"] == "acme" and counters["drafts"] > 0
    assert level["acceptance"]["reconciliation"]["agree"]  # Acme's drafts are verify steps, as declared
    assert level["contamination"]["clean"] and level["contamination"]["server_requests"] == 24
    assert level["server_gauges"]["running"] is not None  # sampled by Acme's gauge names
