"""Valid profiles: the shipped ones load to the expected values, defaults fill the rest, the JSON
Schema matches the loader, and random valid profiles round-trip through YAML."""

from __future__ import annotations

import dataclasses
import json
import math
import re
import typing
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from loadgate.cli import main
from loadgate.config.profile import (
    Distribution,
    Load,
    MixtureComponent,
    Profile,
    is_folder_name,
    load_profile,
    profile_json_schema,
)
from loadgate.config.simconfig import SimConfig
from loadgate.config.typed_yaml import json_schema, load_dataclass, parse_yaml
from loadgate.engine.adapters import apis
from loadgate.errors import ProfileError
from tests.fixtures_path import REPO

PROFILES = REPO / "profiles"
QUICKSTART = PROFILES / "quickstart.yaml"
EXAMPLE_FULL = PROFILES / "example-full.yaml"




def _dataclasses(root: type) -> list[type]:
    """Every dataclass reachable from `root` through field annotations, root first."""
    seen: list[type] = []

    def visit(tp: Any) -> None:
        if dataclasses.is_dataclass(tp) and isinstance(tp, type):
            if tp in seen:
                return
            seen.append(tp)
            for hint in typing.get_type_hints(tp).values():
                visit(hint)
        for arg in typing.get_args(tp):
            visit(arg)

    visit(root)
    return seen


# ------------------------------------------------------------------------------ shipped profiles


def test_quickstart_loads_to_the_newcomer_run_on_the_embedded_simulator() -> None:
    p = load_profile(QUICKSTART)
    assert p.name == "quickstart"
    assert p.path == str(QUICKSTART)
    assert (p.target.endpoint, p.target.api) == ("embedded", "openai-completions")
    assert (p.target.sim.speculative.method, p.target.sim.speculative.k) == ("draft_model", 4)
    assert p.workload.requests == 200
    assert p.workload.input_len == Distribution(dist="uniform", min=64, max=512)
    assert p.workload.output_len == Distribution(dist="fixed", value=128)
    assert p.load == Load(concurrency=16, warmup_requests=16)  # one per slot: every connection opened


def test_quickstart_keeps_simulator_defaults_so_it_stays_fast() -> None:
    sim = load_profile(QUICKSTART).target.sim
    assert dataclasses.replace(sim, speculative=SimConfig().speculative) == SimConfig()
    # Pessimistic run time: requests go in full waves of `concurrency`; each verify step pays the
    # batch cost plus drafting and verifying k tokens for every sequence, and emits the expected
    # acceptance length (bonus token included) per sequence.
    p = load_profile(QUICKSTART)
    n, c, spec = p.workload.requests + p.load.warmup_requests, p.load.concurrency, sim.speculative
    assert isinstance(c, int) and p.workload.output_len.value == 128
    probs = [spec.acceptance[min(i, len(spec.acceptance) - 1)] for i in range(spec.k)]
    tokens_per_step = 1 + sum(math.prod(probs[:i + 1]) for i in range(spec.k))
    step_us = (sim.decode_step_us + (c - 1) * sim.decode_us_per_seq
               + c * spec.k * (sim.verify_us_per_token + sim.draft_us_per_token))
    prefill_us = c * 512 * sim.prefill_us_per_token
    waves = -(-n // c)
    assert waves * (math.ceil(128 / tokens_per_step) * step_us + prefill_us) / 1e6 < 40


def test_example_full_loads_with_every_section_set() -> None:
    p = load_profile(EXAMPLE_FULL)
    assert p.seed == 42
    assert p.target.headers["X-Request-Source"] == "loadgate"
    assert p.target.metrics_url == "http://127.0.0.1:8000/metrics"
    assert p.target.sim.speculative.acceptance == (0.8, 0.6, 0.45, 0.3)
    assert p.workload.input_len.components == (
        MixtureComponent(0.6, Distribution(dist="uniform", min=32, max=256)),
        MixtureComponent(0.3, Distribution(dist="normal", mean=2000.0, std=400.0, min=1024, max=3072)),
        MixtureComponent(0.1, Distribution(dist="fixed", value=4096)))
    assert p.workload.output_len.dist == "lognormal"
    assert p.workload.shared_prefix is not None and p.workload.shared_prefix.groups == 4
    assert (p.load.rate, p.load.arrival, p.load.max_in_flight) == (8.0, "gamma", 256)
    assert p.load.concurrency is None
    assert p.output.run_id == "example-full-001"
    assert (p.slo.ttft_ms, p.health.cpu_max, p.load.workers) == (500.0, 0.95, 1)
    assert isinstance(p.load.duration_s, float) and isinstance(p.target.timeout_s, float)


def test_example_full_mentions_every_settable_field() -> None:
    text = EXAMPLE_FULL.read_text()
    for cls in _dataclasses(Profile):
        for f in dataclasses.fields(cls):
            if not f.metadata.get("internal"):
                assert re.search(rf"\b{f.name}:", text), f"{cls.__name__}.{f.name} not shown"


def test_empty_mapping_gives_all_defaults(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text("{}\n")
    assert load_profile(path) == Profile(path=str(path))
    assert Profile().load == Load(concurrency=1)
    assert Profile().workload.input_len == Distribution(dist="fixed", value=128)


def test_numbers_are_coerced_only_where_exact(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text("name: 1e3\nworkload: {requests: 1e3}\nload: {rate: 2, duration_s: 1_000}\n"
                    "target: {timeout_s: 2.5e+1}\nseed: 7.0\n")
    p = load_profile(path)
    assert p.name == "1e3"
    assert p.workload.requests == 1000 and type(p.workload.requests) is int
    assert p.load.rate == 2.0 and type(p.load.rate) is float
    assert p.load.duration_s == 1000.0 and p.target.timeout_s == 25.0
    assert p.seed == 7 and type(p.seed) is int


@pytest.mark.parametrize("profile", [QUICKSTART, PROFILES / "ab-sim.yaml"], ids=lambda p: p.name)
def test_validate_prints_success_and_exits_zero(profile: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(profile)]) == 0
    out, err = capsys.readouterr()
    assert out == f"{profile}: valid profile {load_profile(profile).name!r}\n"
    assert err == ""


def test_validate_notes_a_warmup_too_short_to_open_every_connection(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "p.yaml"
    path.write_text("load: {concurrency: [1, 8, 32], warmup_requests: 20}\n")
    assert main(["validate", str(path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1] == ("note: load.warmup_requests (20) is below the concurrency (32): up to 12 measured requests "
                      "per level open a connection, and their TTFT includes it")
    path.write_text("load: {concurrency: 8, warmup_requests: 8}\n")
    assert main(["validate", str(path)]) == 0 and len(capsys.readouterr().out.splitlines()) == 1


def test_the_reference_profile_is_valid_but_for_the_baseline_file_a_user_writes(
        capsys: pytest.CaptureFixture[str]) -> None:
    """example-full.yaml sets every key; the one thing it lacks is the baseline `loadgate baseline`
    would write, and validate says so (its corpus, a real file, is found relative to the profile)."""
    assert main(["validate", str(EXAMPLE_FULL)]) == 2
    out, err = capsys.readouterr()
    want = EXAMPLE_FULL.parent / "baselines" / "spec-off-0123456789ab.json"
    assert out == "" and err.startswith(f"loadgate: {EXAMPLE_FULL}:")
    assert err.endswith(f": exactness.baseline: file not found: {want}\n")


# ----------------------------------------------------------------------------------- JSON Schema


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    return profile_json_schema()


def test_schema_command_prints_valid_json_schema(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schema"]) == 0
    printed = json.loads(capsys.readouterr().out)
    jsonschema.Draft202012Validator.check_schema(printed)
    assert printed == json.loads(json.dumps(profile_json_schema()))
    assert printed["$schema"] == "https://json-schema.org/draft/2020-12/schema"


@pytest.mark.parametrize("profile", [QUICKSTART, EXAMPLE_FULL], ids=lambda p: p.name)
def test_shipped_profiles_validate_against_schema(profile: Path, schema: dict[str, Any]) -> None:
    jsonschema.validate(yaml.safe_load(profile.read_text()), schema)


@pytest.mark.parametrize("bad", [
    {"target": {"api": "grpc"}},
    {"load": {"concurency": 4}},
    {"load": {"concurrency": -4}},
    {"load": {"concurrency": [1, 0]}},
    {"target": {"sim": {"speculative": {"acceptance": [0.5, 1.5]}}}},
    {"workload": {"requests": "lots"}},
    {"target": {"headers": {"X-Tenant": 42}}},
    {"path": "/etc"},
])
def test_malformed_profiles_fail_schema_and_loader(bad: dict[str, Any], schema: dict[str, Any]) -> None:
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema)
    with pytest.raises(ProfileError):
        load_dataclass(Profile, bad, file="inline", lines={})


def test_every_field_is_in_schema_with_its_help(schema: dict[str, Any]) -> None:
    for cls in _dataclasses(Profile):
        node = schema if cls is Profile else schema["$defs"][cls.__name__]
        assert node["additionalProperties"] is False
        names = [f.name for f in dataclasses.fields(cls) if not f.metadata.get("internal")]
        assert list(node["properties"]) == names
        for f in dataclasses.fields(cls):
            if not f.metadata.get("internal"):
                assert node["properties"][f.name]["description"] == f.metadata["help"]
    assert "path" not in schema["properties"]


def test_schema_carries_bounds_enums_defaults_and_recursion(schema: dict[str, Any]) -> None:
    defs = schema["$defs"]
    k = defs["SpeculativeConfig"]["properties"]["k"]
    assert (k["type"], k["minimum"], k["maximum"], k["default"]) == ("integer", 1, 16, 4)
    assert defs["SpeculativeConfig"]["properties"]["acceptance"]["items"] == {
        "type": "number", "minimum": 0.0, "maximum": 1.0}
    assert defs["Target"]["properties"]["api"]["enum"][0] == "openai-completions"
    assert defs["Load"]["properties"]["rate"]["anyOf"][0]["exclusiveMinimum"] == 0.0
    assert schema["properties"]["load"]["default"] == {"concurrency": 1}
    assert defs["Target"]["properties"]["headers"]["additionalProperties"] == {"type": "string"}
    assert defs["MixtureComponent"]["properties"]["dist"]["$ref"] == "#/$defs/Distribution"
    assert defs["Distribution"]["properties"]["components"]["items"]["$ref"] == "#/$defs/MixtureComponent"


def test_required_fields_are_required_in_loader_and_schema() -> None:
    @dataclasses.dataclass(frozen=True)
    class Need:
        count: int = dataclasses.field(metadata={"help": "how many", "min": 1})
        label: str = dataclasses.field(default="x", metadata={"help": "a label"})

    assert json_schema(Need)["required"] == ["count"]
    data, lines = parse_yaml("label: y\n", file="need.yaml")
    with pytest.raises(ProfileError, match=r"^need\.yaml:1: missing required key 'count'$"):
        load_dataclass(Need, data, file="need.yaml", lines=lines)
    assert load_dataclass(Need, {"count": 3}, file="-", lines={}) == Need(3)


# ------------------------------------------------------------------------------------ round trip

_probability = st.floats(0.0, 1.0, allow_nan=False)
_lengths = st.tuples(st.integers(1, 10_000), st.integers(1, 10_000)).map(sorted)


@st.composite
def _profiles(draw: st.DrawFn) -> dict[str, Any]:
    lo, hi = draw(_lengths)
    closed = draw(st.booleans())
    load: dict[str, Any] = (
        {"concurrency": draw(st.integers(1, 4096) | st.lists(st.integers(1, 512), min_size=1, max_size=5))}
        if closed else {"rate": draw(st.floats(1e-3, 1e6, allow_nan=False)),
                        "arrival": draw(st.sampled_from(["poisson", "gamma", "constant"]))})
    return {
        "name": draw(st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), max_size=20)
                     .filter(is_folder_name)),
        "seed": draw(st.integers(0, 2**63)),
        "target": {"api": draw(st.sampled_from(apis())),
                   "sim": {"speculative": {"k": draw(st.integers(1, 16)),
                                           "acceptance": draw(st.lists(_probability, min_size=1, max_size=6))}}},
        "workload": {"requests": draw(st.integers(1, 10**6)),
                     "input_len": {"dist": "uniform", "min": lo, "max": hi}},
        "load": load,
    }


@settings(max_examples=150, deadline=None)
@given(_profiles())
def test_random_valid_profiles_round_trip_through_yaml(data: dict[str, Any]) -> None:
    text = yaml.safe_dump(data, allow_unicode=True)
    parsed, lines = parse_yaml(text, file="rt.yaml")
    p = load_dataclass(Profile, parsed, file="rt.yaml", lines=lines)
    assert p.name == data["name"] and p.seed == data["seed"]
    assert p.target.api == data["target"]["api"]
    spec = data["target"]["sim"]["speculative"]
    assert (p.target.sim.speculative.k, p.target.sim.speculative.acceptance) == (
        spec["k"], tuple(spec["acceptance"]))
    assert p.workload.requests == data["workload"]["requests"]
    assert (p.workload.input_len.min, p.workload.input_len.max) == (
        data["workload"]["input_len"]["min"], data["workload"]["input_len"]["max"])
    want = data["load"].get("concurrency")
    assert p.load.concurrency == (tuple(want) if isinstance(want, list) else want)
    assert p.load.rate == data["load"].get("rate")
    assert set(lines) >= {"name", "load", "target.sim.speculative.k", "workload.input_len.max"}


TRICKY = ("a: 1e3\nb: '1e3'\nc: 010\nd: 1:30\ne: yes\nf: ~\ng: 2026-12-02\nh: |\n  text\ni: .inf\n"
          "j: [1, 2.5, x]\nk: {m: -0x1F}\n")


@pytest.mark.parametrize("name", [p.name for p in sorted((REPO / "profiles").glob("*.yaml"))] + ["tricky"])
def test_libyaml_and_pyyaml_read_the_same_data_and_lines(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The fast parser (libyaml) gives what PyYAML's own parser gives: the same values, types and
    key lines, so the speed-up changes nothing a profile means."""
    assert getattr(yaml, "CSafeLoader", None) is not None  # the wheel on PyPI ships libyaml
    text = TRICKY if name == "tricky" else (REPO / "profiles" / name).read_text()
    fast = parse_yaml(text, file="p.yaml")
    monkeypatch.delattr(yaml, "CSafeLoader")
    slow = parse_yaml(text, file="p.yaml")
    assert repr(fast) == repr(slow)  # repr: 1e3 stays the number-or-text type on both sides
    if name == "tricky":
        assert fast[0]["a"] == 1000 and fast[0]["b"] == "1e3" and fast[0]["c"] == "010"


def test_a_syntax_error_reads_as_pyyaml_words_it(monkeypatch: pytest.MonkeyPatch) -> None:
    bad = "load:\n  concurrency: [1, 2\nworkload: x\n"
    with pytest.raises(ProfileError) as fast:
        parse_yaml(bad, file="p.yaml")
    monkeypatch.delattr(yaml, "CSafeLoader")
    with pytest.raises(ProfileError) as slow:
        parse_yaml(bad, file="p.yaml")
    assert str(fast.value) == str(slow.value) and "line 3" in str(fast.value)


def test_thresholds_take_the_mapping_form_beside_strings_and_the_schema_agrees(
        tmp_path: Path, schema: dict[str, Any]) -> None:
    text = ('thresholds:\n  ttft: ["p(99) < 1s", {threshold: "p(50) < 500ms", abort_on_fail: true, '
            'delay_abort_eval: 500ms}]\n  e2e: [{threshold: "p(90) < 2s", abort_on_fail: true, delay_abort_eval: 2m}]\n'
            '  errors: [{threshold: "rate < 5%", abort_on_fail: true, delay_abort_eval: 3}, '
            '{threshold: "count < 10"}]\n')
    path = tmp_path / "t.yaml"
    path.write_text(text)
    jsonschema.validate(yaml.safe_load(text), schema)
    p = load_profile(path)
    assert p.threshold_texts() == {"ttft": ("p(99) < 1s", "p(50) < 500ms"), "e2e": ("p(90) < 2s",),
                                   "errors": ("rate < 5%", "count < 10")}
    assert [(t.metric, t.text, delay) for t, delay in p.aborting_thresholds()] == [
        ("ttft", "p(50) < 500ms", 0.5), ("e2e", "p(90) < 2s", 120.0), ("errors", "rate < 5%", 3.0)]
    with pytest.raises(jsonschema.ValidationError):  # the schema knows the mapping's keys too
        jsonschema.validate({"thresholds": {"ttft": [{"threshold": "p(50) < 1s", "abortOnFail": True}]}}, schema)
