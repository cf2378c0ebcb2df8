"""`loadgate sim`: every knob is an option, config file and options combine, the child process runs."""

from __future__ import annotations

import dataclasses
import re
import urllib.request
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from loadgate.cli import cli
from loadgate.config.simconfig import SimConfig
from loadgate.errors import UsageError
from loadgate.sim.cli import build_config, option_name
from loadgate.sim.process import SimProcess
from loadgate.sim.settings import config_from_mapping, knob_fields


def _leaf_names(cls: type, prefix: str = "") -> list[str]:
    out = []
    for f in dataclasses.fields(cls):
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        if dataclasses.is_dataclass(default):
            out += _leaf_names(type(default), prefix + f.name + "-")
        else:
            out.append(prefix + f.name)
    return out


def test_help_lists_every_knob_with_its_help_text() -> None:
    result = CliRunner().invoke(cli, ["sim", "--help"], terminal_width=200)
    assert result.exit_code == 0
    text = " ".join(result.output.split())
    names = _leaf_names(SimConfig)
    assert len(names) == len(knob_fields()) >= 30
    for name in names:
        assert "--" + name.replace("_", "-") in text, name
    for k in knob_fields():
        assert " ".join(k.help.split())[:40] in text, k.dotted
        if k.type is bool:
            assert f"--no-{option_name(k)[2:]}" in text
    for opt in ("--host", "--port", "--config"):
        assert opt in text


def test_options_override_the_config_file_which_overrides_defaults(tmp_path: Path) -> None:
    f = tmp_path / "sim.yaml"
    f.write_text("seed: 3\nmax_num_seqs: 8\nspeculative:\n  method: ngram\n  acceptance: [0.5, 0.25]\n"
                 "faults:\n  http_429: 0.1\n")
    cfg = build_config(str(f), {"seed": 9, "speculative__k": 2, "divergence__batch_variant": True,
                                "faults__stall_s": None})
    assert (cfg.seed, cfg.max_num_seqs) == (9, 8)
    assert cfg.speculative == dataclasses.replace(cfg.speculative, method="ngram", k=2, acceptance=(0.5, 0.25))
    assert cfg.divergence.batch_variant and cfg.faults.http_429 == 0.1 and cfg.faults.stall_s == 1.0
    assert build_config(None, {"speculative__acceptance": "0.9,0.1"}).speculative.acceptance == (0.9, 0.1)


@pytest.mark.parametrize("data, words", [
    ({"sed": 1}, "unknown key 'sed'"),
    ({"speculative": {"k": 99}}, "speculative.k: expected"),
    ({"speculative": {"method": "eagle"}}, "expected one of"),
    ({"near_tie_rate": "high"}, "near_tie_rate: expected a number"),
    ({"near_tie_rate": float("nan")}, "near_tie_rate: expected"),
    ({"decode_step_us": float("inf")}, "decode_step_us: expected"),
    ({"divergence": {"batch_variant": "yes"}}, "expected true or false"),
    ({"speculative": {"acceptance": "0.8,x"}}, "speculative.acceptance[1]: expected a number"),
    ({"speculative": {"method": "ngram", "acceptance": ","}}, "speculative.acceptance: needs at least one"),
    ({"speculative": {"method": "ngram", "acceptance": []}}, "speculative.acceptance: needs at least one"),
])
def test_bad_settings_name_the_key(data: dict, words: str) -> None:
    with pytest.raises(UsageError, match=re.escape(words)):
        config_from_mapping(data)


def test_a_bad_config_file_or_option_is_one_line_with_file_line_and_key(tmp_path) -> None:
    f = tmp_path / "sim.yaml"
    f.write_text("seed: 3\nspeculative: 5\n")
    with pytest.raises(UsageError, match=re.escape(f"{f}:2: speculative: must be a mapping")):
        build_config(str(f), {"speculative__k": 2})
    f.write_text("seed: 3\nnear_tie_rate: 2.0\n")
    with pytest.raises(UsageError, match=re.escape(f"{f}:2: near_tie_rate: expected")):
        build_config(str(f), {})
    with pytest.raises(UsageError, match=re.escape("loadgate sim options: speculative.k: expected")):
        build_config(None, {"speculative__k": 99})
    f.write_bytes(b"seed: \xff\n")
    with pytest.raises(UsageError, match="not UTF-8"):
        build_config(str(f), {})


def test_config_round_trips_through_json() -> None:
    cfg = SimConfig(seed=4, model="m")
    cfg = dataclasses.replace(cfg, speculative=dataclasses.replace(cfg.speculative, method="draft_model"))
    assert config_from_mapping(orjson.loads(orjson.dumps(cfg))) == cfg


def test_sim_process_serves_from_a_child_process_and_stops() -> None:
    cfg = SimConfig(seed=5, decode_step_us=100.0, decode_us_per_seq=0.0)
    with SimProcess(cfg, startup_timeout=30) as sim:
        assert sim.url.startswith("http://127.0.0.1:")
        body = orjson.dumps({"prompt": "child", "max_tokens": 5, "temperature": 0, "ignore_eos": True})
        req = urllib.request.Request(sim.url + "/v1/completions", data=body,
                                     headers={"Content-Type": "application/json", "x-request-id": "c-1"})
        with urllib.request.urlopen(req, timeout=10) as r:
            assert orjson.loads(r.read())["usage"]["completion_tokens"] == 5
        with urllib.request.urlopen(sim.url + "/sim/config", timeout=10) as r:
            assert orjson.loads(r.read())["seed"] == 5
        recs = sim.truth_records()
        assert [r["request_id"] for r in recs] == ["c-1"]
        sim.reset_truth()
        assert sim.truth_records() == []
        proc, cfg_file = sim._proc, sim._cfg_file
        assert cfg_file is not None and Path(cfg_file).exists()
    assert proc is not None and proc.poll() is not None
    assert not Path(cfg_file).exists()  # its config file goes with it
