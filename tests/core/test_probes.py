"""The capacity search's probe-size rules (loadgate.core.probes), and docs/capacity.md stating them
with the numbers the code computes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from loadgate.config.profile import load_profile
from loadgate.core import probes
from loadgate.core.thresholds import parse

DOC = Path(__file__).resolve().parents[2] / "docs" / "capacity.md"


@pytest.mark.parametrize(("q", "need"), [(50, 20), (90, 100), (95, 200), (99, 1000), (99.9, 10000)])
def test_a_quantile_needs_ten_samples_above_it(q: float, need: int) -> None:
    assert probes.requests_needed(q) == need
    assert f"p{q:g} {need:,}" in DOC.read_text()


def test_the_strictest_threshold_is_the_highest_quantile_and_a_mean_counts_as_p50() -> None:
    ts = [parse("ttft", "avg < 1s"), parse("itl", "p(95) < 50ms"), parse("ttft", "p(90) < 2s")]
    assert probes.strictest(ts) == ts[1]
    assert probes.quantile_of(ts[0]) == 50.0


def test_finest_resolution_is_one_over_root_n_as_the_doc_says() -> None:
    assert probes.finest_resolution(100) == pytest.approx(0.10)
    assert probes.finest_resolution(400) == pytest.approx(0.05)
    assert "100 requests resolve 10 %, 400 resolve 5 %" in DOC.read_text()


def test_the_docs_search_profile_validates(tmp_path: Path) -> None:
    block = re.search(r"```yaml\n(.*?)```", DOC.read_text(), re.S)
    assert block is not None
    path = tmp_path / "search.yaml"
    path.write_text(block.group(1))
    p = load_profile(path)
    assert p.load.search is not None and p.load.search.resolution == 0.05
