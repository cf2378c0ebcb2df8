"""Where prompt tokens come from: the server's /tokenize, a local Hugging Face tokenizer, or none.

The simulator can turn its /tokenize off (as gateways and hosted endpoints do) and write its own
tokenizer and chat template as a Hugging Face folder, so all three paths run against a server
whose usage counts are the ground truth."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from loadgate.cli import main
from loadgate.jsonutil import load_json
from loadgate.load.workload.hf import HFTokenizer, TemplateError
from loadgate.records import read_records
from loadgate.sim.chat import chat_prompt_ids
from loadgate.sim.hf_export import write_hf_tokenizer
from loadgate.sim.tokenizer import Tokenizer
from loadgate.sim.vocab import SPECIAL_TOKENS
from tests.profiles import LAX_HEALTH, tiny_corpus

SIM_VOCAB = 4096


@pytest.fixture(scope="module")
def hf_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_hf_tokenizer(SIM_VOCAB, tmp_path_factory.mktemp("simtok"))


@pytest.fixture(scope="module")
def pair(hf_folder: Path) -> tuple[Tokenizer, HFTokenizer]:
    return Tokenizer(SIM_VOCAB), HFTokenizer.load(hf_folder)


PIECES = st.sampled_from([" ", "  ", "\n", "\n    ", "\t", ".", ",", "(", ")", "):", "self.", "__init__", "the",
                          " the", "The", "é", "€", "😀", "<|im_start|>", "<|im_end|>", "<|endoftext|>", "0", "42",
                          "abc", " xyz", "'", '"', "==", "->"])
TEXT = st.lists(st.one_of(PIECES, st.text(max_size=6)), max_size=40).map("".join)


@settings(max_examples=300, deadline=None)
@given(TEXT)
def test_the_exported_tokenizer_encodes_every_text_as_the_simulator_does(pair: Any, text: str) -> None:
    sim, hf = pair
    assert hf.encode(text) == sim.encode(text)


def test_the_exported_chat_template_renders_what_the_simulator_renders(pair: Any) -> None:
    sim, hf = pair
    messages = [{"role": "system", "content": "Be brief."},
                {"role": "user", "content": [{"type": "text", "text": " river"}, {"type": "image_url"},
                                             {"type": "text", "text": " cache"}]},
                {"role": "assistant", "content": None}, {"role": "user", "content": "Why?"}]
    for gen in (True, False):
        assert hf.chat_ids(messages, add_generation_prompt=gen) == chat_prompt_ids(sim, messages, None, gen)
    with pytest.raises(TemplateError, match="sha256"):  # the simulator's tool header needs a hash
        hf.chat_ids(messages, tools=[{"type": "function", "function": {"name": "f"}}])
    assert hf.special["eos_token"] == SPECIAL_TOKENS[0]


def write_profile(tmp: Path, *, api: str, tokenizer: str | None, tokenize_route: bool = False) -> Path:
    doc: dict[str, Any] = {
        "name": "tok", "seed": 3,
        "target": {"endpoint": "embedded", "api": api,
                   "sim": {"tokenize": tokenize_route, "decode_step_us": 500, "decode_us_per_seq": 10}},
        "workload": {"requests": 24, "input_len": {"dist": "uniform", "min": 8, "max": 96},
                     "output_len": {"dist": "fixed", "value": 6}},
        "load": {"concurrency": 4, "warmup_requests": 4},
        "exactness": {"baseline": "sim-reference", "corpus": str(tiny_corpus(tmp))},
        "health": LAX_HEALTH,
        "output": {"dir": str(tmp / "out"), "run_id": "r"},
    }
    if tokenizer is not None:
        doc["workload"]["tokenizer"] = tokenizer
    p = tmp / "p.yaml"
    p.write_text(yaml.safe_dump(doc))
    return p


@pytest.mark.parametrize("api", ["openai-chat", "openai-completions"])
def test_a_local_hf_tokenizer_plans_prompt_lengths_equal_to_the_servers_usage_counts(tmp_path, hf_folder, api,
                                                                                      capsys):
    p = write_profile(tmp_path, api=api, tokenizer=str(hf_folder))
    assert main(["run", "-q", str(p)]) == 0
    records = list(read_records(tmp_path / "out" / "r" / "records.jsonl"))
    assert len(records) == 24 and all(r.error is None for r in records)
    assert len({r.prompt_tokens for r in records}) > 5  # the lengths really vary
    assert all(r.prompt_tokens_planned == r.prompt_tokens for r in records)  # exact, chat template included
    tc = load_json(tmp_path / "out" / "r" / "summary.json")["levels"]["4"]["token_counts"]
    assert (tc["checked"], tc["prompt_mismatches"], tc["prompt_unverified"]) == (24, 0, 0)
    assert f"prompts planned with local tokenizer {hf_folder}" in capsys.readouterr().out


@pytest.mark.parametrize("api", ["openai-chat", "openai-completions"])
def test_without_any_tokenizer_prompts_are_text_and_counts_come_from_usage(tmp_path, api, capsys):
    p = write_profile(tmp_path, api=api, tokenizer="none")
    assert main(["run", "-q", str(p)]) == 0
    records = list(read_records(tmp_path / "out" / "r" / "records.jsonl"))
    assert len(records) == 24 and all(r.error is None for r in records)
    assert all(r.prompt_tokens_planned is None and r.prompt_tokens > 0 for r in records)
    assert all(r.completion_tokens == 6 for r in records)
    s = load_json(tmp_path / "out" / "r" / "summary.json")
    tc = s["levels"]["4"]["token_counts"]
    assert (tc["prompt_mismatches"], tc["completion_mismatches"], tc["prompt_not_planned"]) == (0, 0, 24)
    assert s["token_pool"]["exact"] is False and s["levels"]["4"]["throughput"]["input_token_throughput"] > 0
    out = capsys.readouterr().out
    assert "24 not planned in tokens (no tokenizer: planned in words)" in out
    assert "prompts planned with none (text prompts, planned in words); measured prompt counts: server usage" in out


def test_a_server_without_tokenize_is_one_line_naming_the_three_sources_and_leaves_no_folder(tmp_path, capsys):
    p = write_profile(tmp_path, api="openai-completions", tokenizer=None)
    assert main(["run", "-q", str(p)]) == 3
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "HTTP 404" in err
    for option in ("workload.tokenizer: server", "workload.tokenizer: PATH", "workload.tokenizer: none"):
        assert option in err
    assert not (tmp_path / "out").exists()  # failed before sending: nothing behind


def test_with_its_tokenize_route_on_the_simulator_is_the_default_source(tmp_path, pair):
    p = write_profile(tmp_path, api="openai-chat", tokenizer=None, tokenize_route=True)
    assert main(["run", "-q", str(p)]) == 0
    meta = load_json(tmp_path / "out" / "r" / "meta.json")
    assert meta["token_pool"]["source"].startswith("server /tokenize")
    # the server's template count is the local template's around an empty message
    assert meta["chat_template_tokens"] == len(pair[1].chat_ids([{"role": "user", "content": ""}])) > 0
