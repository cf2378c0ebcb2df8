"""The capacity search's decisions (loadgate.analysis.search) against a threshold that passes up to
a known knee: bracketing doubles from lo, bisection stops within the resolution."""

from __future__ import annotations

import pytest

from loadgate.analysis.search import Bracket, Probe, answer, bracket, lowest_fails, next_load
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



def test_rate_probe_loads_are_rounded_to_4_significant_digits_from_lo_on() -> None:
    knee = 8 / (20 * 0.004 + 8 * 0.0004)  # 96.15…: the timing test's saturation rate
    lo = knee * 0.52  # 50.00000000000001 in floats
    assert lo != 50.0
    probes = _run(Search(over="rate", lo=lo, hi=lo * 4, resolution=0.05), knee)
    loads = [p.load for p in probes]
    assert loads[:4] == [50.0, 100.0, 75.0, 87.5]  # the level keys read "50.0", "100.0", "75.0", "87.5"
    assert all(float(f"{x:.4g}") == x for x in loads)
    assert [str(x) for x in loads[4:]] == ["93.75", "96.88"]  # halfway (96.875), then rounded
    assert answer(probes) == 93.75 and bracket(probes) == Bracket(93.75, 96.88)


def test_bisection_ends_when_the_rounded_halfway_load_is_one_of_the_two_ends() -> None:
    # a resolution finer than 4 digits can tell apart: 1.000 passes, 1.001 fails, halfway rounds to 1.000 or 1.001
    probes = _run(Search(over="rate", lo=1.0, hi=2.0, resolution=1e-5), 1.0004)
    assert bracket(probes) == Bracket(1.0, 1.001)
    assert next_load(Search(over="rate", lo=1.0, hi=2.0, resolution=1e-5), probes) is None
    assert len({p.load for p in probes}) == len(probes)  # no load probed twice


def test_a_rounded_hi_is_probed_once_and_ends_the_search() -> None:
    s = Search(over="rate", lo=1.0, hi=3.14159, resolution=0.05)
    probes = _run(s, 100.0)
    assert [p.load for p in probes] == [1.0, 2.0, 3.142]
    assert answer(probes) == 3.142 and bracket(probes).failing is None
