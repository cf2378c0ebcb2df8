"""The gate's one rule, at run time: the performance phase starts only with a token the gate
issued (after a passing check, or the explicit `--unverified`), for the live configuration; single
runs, sweeps and A/B all take that one path."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import yaml

import loadgate
from loadgate import runs
from loadgate.cli import main
from loadgate.config.profile import Exactness, Profile, load_profile
from loadgate.config.simconfig import SimConfig
from loadgate.errors import ExactnessNotEstablished
from loadgate.gate import policy
from loadgate.gate.attestation import Attestation, Unverified
from loadgate.jsonutil import load_json
from loadgate.net.connect import open_engine, run_async
from tests.profiles import LAX_BUDGETS, LAX_HEALTH, tiny_corpus
from tests.simtruth import profile_for

FAST = SimConfig(decode_step_us=500, decode_us_per_seq=10)


def embedded(tmp: Path, sim_cfg: SimConfig = FAST) -> Profile:
    """A small profile on an embedded simulator, checked against its reference output."""
    prof = profile_for("embedded", tmp, requests=4, concurrency=2, osl=4)
    return dataclasses.replace(prof, target=dataclasses.replace(prof.target, sim=sim_cfg),
                               exactness=Exactness(corpus=str(tiny_corpus(tmp))))


def _measure_with(token_of: Any, tmp: Path, sim_cfg: SimConfig = FAST) -> Path:
    """Open a simulator, get a token from `token_of(engine, run_dir)`, and measure with it."""
    tmp.mkdir(parents=True, exist_ok=True)
    prof = embedded(tmp, sim_cfg)
    run_dir = tmp / "r"
    run_dir.mkdir()

    async def go() -> None:
        async with open_engine(prof) as e:
            tokens = await runs.prepare_tokens(prof, e)
            token = await token_of(e, run_dir)
            await runs.measure(token, e, run_dir, tokens)

    run_async(go())
    return run_dir


@pytest.mark.parametrize("forged", [None, "attestation", "unverified", "a dict"])
def test_a_token_the_gate_did_not_issue_is_refused_before_anything_is_sent(tmp_path, forged):
    async def forge(e: Any, run_dir: Path) -> Any:
        return {None: None, "attestation": Attestation({"fingerprint_hash": "0" * 64, "fingerprint": {}}),
                "unverified": Unverified(), "a dict": {"fingerprint_hash": "0" * 64}}[forged]

    with pytest.raises(ExactnessNotEstablished, match="issued by the gate"):
        _measure_with(forge, tmp_path)
    assert not (tmp_path / "r" / "records.jsonl").exists()


def test_a_copy_of_an_issued_attestation_is_refused(tmp_path):
    async def copy_of_real(e: Any, run_dir: Path) -> Any:
        async with policy.attested(e, run_dir, lambda text: None) as att:
            return Attestation(dict(att.doc))  # the same document, but not the gate's token

    with pytest.raises(ExactnessNotEstablished, match="issued by the gate"):
        _measure_with(copy_of_real, tmp_path)


def test_an_attestation_for_another_fingerprint_is_refused(tmp_path):
    """An attestation the gate issued for one engine does not let another configuration measure."""
    held: dict[str, Any] = {}
    other_prof = embedded(tmp_path)
    (tmp_path / "c").mkdir()

    async def attest_other() -> None:
        async with open_engine(other_prof) as e, policy.attested(e, tmp_path / "c", lambda t: None) as att:
            held["att"] = att

    run_async(attest_other())

    async def theirs(e: Any, run_dir: Path) -> Any:
        return held["att"]

    with pytest.raises(ExactnessNotEstablished, match="fingerprint changed between the check and the measurement"):
        _measure_with(theirs, tmp_path, SimConfig(decode_step_us=500, decode_us_per_seq=10, max_num_seqs=9))


def test_the_gates_own_tokens_measure(tmp_path):
    async def attested(e: Any, run_dir: Path) -> Any:
        async with policy.attested(e, run_dir, lambda text: None) as att:
            return att

    assert (_measure_with(attested, tmp_path / "a") / "records.jsonl").exists()

    async def unverified(e: Any, run_dir: Path) -> Any:
        async with policy.unverified(e) as u:
            return u

    run_dir = _measure_with(unverified, tmp_path / "u")
    assert load_json(run_dir / "meta.json")["unverified"] is True


def test_single_runs_sweeps_and_ab_all_measure_through_the_gate(tmp_path, monkeypatch):
    seen: list[tuple[type, bool]] = []
    real = runs.measure

    async def spy(token: Any, *a: Any, **k: Any) -> None:
        seen.append((type(token), token in policy._ISSUED))
        await real(token, *a, **k)

    monkeypatch.setattr(runs, "measure", spy)
    base = {"target": {"endpoint": "embedded", "sim": {"decode_step_us": 500, "decode_us_per_seq": 10}},
            "workload": {"requests": 6, "input_len": {"dist": "fixed", "value": 8},
                         "output_len": {"dist": "fixed", "value": 4}},
            "exactness": {"baseline": "sim-reference", "corpus": str(tiny_corpus(tmp_path))},
            "health": LAX_HEALTH, "output": {"dir": str(tmp_path / "out")}}
    shapes = {"single": {"load": {"concurrency": 2}}, "sweep": {"load": {"concurrency": [1, 2]}},
              "ab": {"load": {"concurrency": 2}, "ab": {"baseline": base["target"], "pairs": 2}}}
    for name, extra in shapes.items():
        p = tmp_path / f"{name}.yaml"
        p.write_text(yaml.safe_dump({**base, "name": name, **extra}))
        seen.clear()
        result = loadgate.run(load_profile(p))
        assert result.exit_code in (0, 22), result.judgement.verdict.message  # A/B of 2 pairs: inconclusive
        assert seen and all(t is Attestation and issued for t, issued in seen), (name, seen)
        assert len(seen) == {"single": 1, "sweep": 1, "ab": 4}[name]
    assert main(["run", "-q", "--unverified", str(tmp_path / "single.yaml")]) == 11
    assert seen[-1] == (Unverified, True)


def test_measuring_needs_a_token_argument():
    import inspect

    params = list(inspect.signature(runs.measure).parameters)
    assert params[0] == "token"
    assert LAX_BUDGETS.cpu_max > 1  # (the shared budgets the other tests here run with)
