"""load.rate as a list: a sweep of open-loop levels, each planned at its own rate."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadgate.cli import main
from loadgate.config.profile import Distribution, Load, Profile, Workload
from loadgate.load.executors import Rate
from loadgate.load.levels import at_level, levels
from loadgate.load.plan import build_plan

POOL = list(range(100, 400))


def _profile(rate: float | tuple[float, ...]) -> Profile:
    return Profile(workload=Workload(requests=6, input_len=Distribution(dist="fixed", value=4),
                                     output_len=Distribution(dist="fixed", value=2)),
                   load=Load(rate=rate, arrival="constant", max_in_flight=3))


def test_a_rate_list_gives_one_open_loop_level_per_rate_in_order_each_with_the_cap() -> None:
    assert levels(_profile((5.0, 10.0, 20.0))) == [Rate(5.0, 3), Rate(10.0, 3), Rate(20.0, 3)]
    assert levels(_profile(5.0)) == [Rate(5.0, 3)]


def test_each_sweep_level_plans_its_arrival_times_at_its_own_rate() -> None:
    sweep = _profile((5.0, 20.0))
    offsets = [[r.intended_offset_ns for r in build_plan(at_level(sweep, loop), POOL) if not r.warmup]
               for loop in levels(sweep)]
    assert offsets[0] == [k * 200_000_000 for k in range(6)]  # constant gaps of 1/5 s
    assert offsets[1] == [k * 50_000_000 for k in range(6)]   # and of 1/20 s
    single = _profile(5.0)
    assert at_level(single, levels(single)[0]) is single


@pytest.mark.parametrize(("rate", "reason"), [
    ("[]", "load.rate: a sweep needs at least one value"),
    ("[5, 0]", "load.rate[1]: expected a number > 0, got 0"),
])
def test_a_bad_rate_sweep_is_refused_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                 rate: str, reason: str) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(f"load: {{rate: {rate}}}\n")
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and str(path) in err and reason in err, err
