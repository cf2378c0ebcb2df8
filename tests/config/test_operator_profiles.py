"""profiles/operators/: for each engine a reference profile (what `loadgate baseline` reads) that
validates as it is, and a candidate of the same engine and API whose baseline path, read from its
own folder as every path in a profile is, is where `loadgate baseline` run from the repository
writes (docs/operators.md; the engine tests run vLLM's pair through the guide's commands)."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadgate.cli import main
from loadgate.config.profile import load_profile

ROOT = Path(__file__).resolve().parents[2]
FOLDER = ROOT / "profiles" / "operators"


@pytest.mark.parametrize("engine", ["vllm", "sglang", "llamacpp"])
def test_each_engine_has_a_reference_that_validates_and_a_candidate_that_points_at_its_baseline(engine, capsys):
    ref, cand = FOLDER / f"{engine}-reference.yaml", FOLDER / f"{engine}-candidate.yaml"
    assert main(["validate", str(ref)]) == 0, capsys.readouterr().err
    assert "note:" not in capsys.readouterr().out  # nothing to warn about in a profile we ship
    r, c = load_profile(ref), load_profile(cand)
    assert (r.target.api, r.target.endpoint) == (c.target.api, c.target.endpoint)
    assert r.target.declared["speculative"] == "none" != c.target.declared["speculative"]
    assert c.exactness is not None and c.resolve(c.exactness.baseline).resolve() == \
        ROOT / "baselines" / f"{engine}-reference.json"


def test_the_guide_names_every_engines_profiles():
    guide = (ROOT / "docs" / "operators.md").read_text()
    for f in FOLDER.glob("*.yaml"):
        assert f"profiles/operators/{f.name}" in guide, f.name
