"""The capacity search's decisions (loadgate.analysis.search) against a threshold that passes up to
a known knee: bracketing doubles from lo, bisection stops within the resolution."""

from __future__ import annotations

import pytest

from loadgate.analysis.search import Probe, answer, bracket, lowest_fails, next_load
from loadgate.config.profile import Search


def _run(search: Search, knee: float) -> list[Probe]:
    probes: list[Probe] = []
    while (load := next_load(search, probes)) is not None:
        assert len(probes) < 50, "the search does not end"
        probes.append(Probe(load, load <= knee))
    return probes


@pytest.mark.parametrize("knee", [1.3, 7.0, 23.9, 49.0])
def test_rate_search_answer_is_within_one_resolution_step_below_the_knee(knee: float) -> None:
    s = Search(over="rate", lo=1.0, hi=64.0, resolution=0.05)
    probes = _run(s, knee)
    a = answer(probes)
    assert a is not None and a <= knee
    b = bracket(probes)
    assert b.failing is not None and b.failing > knee
    assert b.width is not None and b.width <= 0.05
    assert (knee - a) / a <= 0.05


def test_rate_search_brackets_by_doubling_from_lo_then_bisects() -> None:
    probes = _run(Search(over="rate", lo=1.0, hi=64.0, resolution=0.05), 5.0)
    assert [p.load for p in probes[:4]] == [1.0, 2.0, 4.0, 8.0]
    assert probes[4].load == 6.0  # halfway between the last pass (4) and the first fail (8)


@pytest.mark.parametrize("knee", [1, 2, 5, 11, 16])
def test_concurrency_search_finds_the_exact_whole_number_knee(knee: int) -> None:
    probes = _run(Search(over="concurrency", lo=1, hi=16, resolution=0.05), knee)
    assert all(p.load == int(p.load) for p in probes)
    assert answer(probes) == knee


def test_search_ends_at_hi_unbracketed_when_every_load_passes() -> None:
    probes = _run(Search(over="rate", lo=1.0, hi=10.0, resolution=0.05), 100.0)
    assert [p.load for p in probes] == [1.0, 2.0, 4.0, 8.0, 10.0]
    assert answer(probes) == 10.0 and bracket(probes).failing is None


def test_search_whose_lowest_probe_fails_ends_after_it_with_no_answer() -> None:
    s = Search(over="rate", lo=2.0, hi=10.0, resolution=0.05)
    probes = _run(s, 1.0)
    assert [p.load for p in probes] == [2.0]
    assert lowest_fails(s, probes) and answer(probes) is None

