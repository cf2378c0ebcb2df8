"""The public API is what `loadgate.__all__` says, pinned here: a name added or removed is a
decision (and a changelog line), never an accident. Every name resolves, each to the object its
stage module defines, and importing the package loads none of the stages."""

from __future__ import annotations

import subprocess
import sys

import pytest

import loadgate

PINNED = ["__version__", "errors", "load_profile", "Profile", "run", "check", "RunResult", "judge", "Verdict",
          "Judgement"]


def test_all_is_the_pinned_list():
    assert loadgate.__all__ == PINNED


def test_every_public_name_resolves_to_its_stage_modules_object():
    from loadgate import config, errors, runs, verdict  # noqa: F401 - the stages the names come from

    expected = {"__version__": loadgate.version.__version__, "errors": sys.modules["loadgate.errors"],
                "load_profile": sys.modules["loadgate.config.profile"].load_profile,
                "Profile": sys.modules["loadgate.config.profile"].Profile, "run": runs.run, "check": runs.check,
                "RunResult": runs.RunResult, "judge": verdict.judge, "Verdict": verdict.Verdict,
                "Judgement": verdict.Judgement}
    assert set(expected) == set(PINNED)
    for name in PINNED:
        assert getattr(loadgate, name) is expected[name], name
    with pytest.raises(AttributeError, match="no attribute 'measure'"):
        loadgate.measure  # noqa: B018 - a stage function, not public


def test_importing_the_package_loads_no_stage():
    code = "import sys, loadgate; print(sorted(m for m in sys.modules if m.startswith('loadgate.')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "['loadgate.version']"
