"""The reference corpus: the shipped file, its hash, prompt generation, validation, and lengths
as the simulator's tokenizer counts them."""

from __future__ import annotations

import json
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest

from loadgate.config.simconfig import SimConfig
from loadgate.errors import UsageError
from loadgate.exactness.corpus import (
    Case,
    CorpusError,
    build_reference_cases,
    default_corpus_path,
    load_corpus,
    parse_case,
    render_jsonl,
)
from loadgate.load.workload.text import filler_text
from loadgate.sim.process import SimProcess
from tests.fixtures_path import REPO

# Changing any case, or the generated text behind one, changes this hash and so invalidates every
# attestation made with the shipped corpus: update it only on purpose.
SHIPPED_SHA256 = "0585d9a7732efe9203d51041b7856df0fc3b1c8fc614070d53a0ab93062017f7"
GOOD = {"id": "ok", "kind": "completion", "max_tokens": 8, "prompt": "Hello"}


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def raw_cases() -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in default_corpus_path().read_bytes().splitlines() if line.strip()]


def test_default_corpus_path_is_the_repository_workloads_file() -> None:
    assert default_corpus_path() == REPO / "workloads" / "reference.jsonl"
    assert default_corpus_path().is_file()


def test_shipped_corpus_has_the_intended_cases_per_tag() -> None:
    corpus = load_corpus(default_corpus_path())
    cases = corpus.cases
    tags = Counter(t for c in cases for t in c.tags)
    assert 40 <= len(cases) <= 60
    assert len({c.id for c in cases}) == len(cases)
    assert {k: tags[k] for k in ("short", "repeat", "shared-prefix", "chat", "tools", "multi-turn", "stop",
                                 "threshold", "long")} == {
        "short": 15, "repeat": 4, "shared-prefix": 5, "chat": 9, "tools": 4, "multi-turn": 3, "stop": 4,
        "threshold": 10, "long": 3}
    assert tags["code"] >= 5 and tags["prose"] >= 5
    for c in cases:
        assert (c.kind == "chat") == ("chat" in c.tags), c.id
        assert (c.prompt is None) == (c.kind == "chat") == (c.messages is not None), c.id
        if "long" in c.tags:
            assert c.max_tokens == 64, c.id
        else:
            assert 32 <= c.max_tokens <= 128, c.id
        if "tools" in c.tags:
            assert c.tools and all(t["type"] == "function" for t in c.tools), c.id
        if "multi-turn" in c.tags:
            assert c.messages is not None and len(c.messages) >= 3, c.id
        if "stop" in c.tags:
            assert c.stop, c.id
    assert [c.id for c in corpus.select(long=True)] == ["long-8200", "long-8600", "long-9000"]
    assert len(corpus.select(long=False)) == len(cases) - 3
    assert not any("long" in c.tags for c in corpus.select(long=False))


def test_committed_file_is_exactly_the_generator_output() -> None:
    assert default_corpus_path().read_bytes() == render_jsonl(build_reference_cases()), (
        "workloads/reference.jsonl is stale: run `python -m loadgate.exactness.corpus`")


def test_corpus_hash_is_pinned_stable_and_covers_the_resolved_text(tmp_path: Path) -> None:
    a, b = load_corpus(default_corpus_path()), load_corpus(default_corpus_path())
    assert a.sha256 == b.sha256 == SHIPPED_SHA256
    text = default_corpus_path().read_text(encoding="utf-8")
    one_char = write_lines(tmp_path / "one.jsonl", text.replace("capital of France", "capital of Frange").splitlines())
    assert load_corpus(one_char).sha256 != a.sha256
    seed = write_lines(tmp_path / "seed.jsonl", text.replace('"prompt_seed":5000,', '"prompt_seed":5099,').splitlines())
    assert load_corpus(seed).sha256 != a.sha256
    # the same cases written differently (key order, spacing) are the same corpus
    rewritten = [json.dumps(dict(reversed(list(c.items()))), indent=None, separators=(" , ", " : "))
                 for c in raw_cases()]
    assert load_corpus(write_lines(tmp_path / "same.jsonl", rewritten)).sha256 == a.sha256


def test_generated_prompts_resolve_to_the_same_text_every_time() -> None:
    line = {"id": "g", "kind": "completion", "max_tokens": 8, "prompt_words": 120, "prompt_seed": 31,
            "prompt": "\n\nSummary:"}
    first, again = parse_case(line), parse_case(dict(line))
    assert first.prompt == again.prompt == filler_text(120, 31) + "\n\nSummary:"
    assert first.prompt is not None and len(filler_text(120, 31).split()) == 120
    assert parse_case({**line, "prompt_seed": 32}).prompt != first.prompt
    assert first == again and hash(first) == hash(again)
    by_id = {c.id: c for c in load_corpus(default_corpus_path()).cases}
    raw = {c["id"]: c for c in raw_cases()}
    for cid in ("threshold-0250", "long-9000", "repeat-medium-a"):
        assert by_id[cid].prompt == filler_text(raw[cid]["prompt_words"], raw[cid]["prompt_seed"]) + raw[cid]["prompt"]


def test_shared_prefix_cases_share_exactly_their_prefix() -> None:
    raw = [c for c in raw_cases() if "shared-prefix" in c["tags"]]
    assert len(raw) >= 4 and {(c["prefix_words"], c["prefix_seed"]) for c in raw} == {(400, 4242)}
    prefix = filler_text(400, 4242)
    cases = [c for c in load_corpus(default_corpus_path()).cases if "shared-prefix" in c.tags]
    suffixes = set()
    for c in cases:
        assert c.prompt is not None and c.prompt.startswith(prefix)
        suffixes.add(c.prompt[len(prefix):])
    assert len(suffixes) == len(cases) and "" not in suffixes


def test_repeat_cases_are_identical_but_for_their_id() -> None:
    cases = [c.to_json() for c in load_corpus(default_corpus_path()).cases if "repeat" in c.tags]
    groups = Counter(orjson.dumps({k: v for k, v in c.items() if k != "id"}, option=orjson.OPT_SORT_KEYS)
                     for c in cases)
    assert len(cases) == 4 and sorted(groups.values()) == [2, 2]


def test_chat_case_keeps_messages_and_tools() -> None:
    c = next(c for c in load_corpus(default_corpus_path()).cases if c.id == "chat-tools-result")
    assert isinstance(c, Case) and c.kind == "chat" and c.prompt is None
    assert c.messages is not None and [m["role"] for m in c.messages] == ["system", "user", "assistant", "tool"]
    assert c.messages[2]["content"] is None and c.tools is not None
    assert c.tools[0]["function"]["name"] == "get_weather"
    assert c.to_json()["messages"] == list(c.messages)


BAD_LINES = [  # (line, key, words in the reason)
    ({**GOOD}, "id", "duplicate id 'ok' (first used on line 1)"),
    ({**GOOD, "id": "x", "temperature": 0}, "temperature", "unknown key"),
    ({"id": "x", "kind": "completion", "prompt": "Hi"}, "max_tokens", "missing"),
    ({**GOOD, "id": "x", "max_tokens": 0}, "max_tokens", "integer >= 1, got 0"),
    ({**GOOD, "id": "x", "max_tokens": "64"}, "max_tokens", "integer >= 1, got '64'"),
    ({**GOOD, "id": "x", "max_tokens": True}, "max_tokens", "integer >= 1, got True"),
    ({**GOOD, "id": "x", "kind": "embedding"}, "kind", "'completion' or 'chat'"),
    ({**GOOD, "id": 7}, "id", "non-empty string"),
    ({"id": "x", "kind": "completion", "max_tokens": 8, "prompt_words": 10, "prompt_seed": 1,
      "prefix_words": 10, "prefix_seed": 1, "prompt": "?"}, "prefix_words", "two prompt sources"),
    ({"id": "x", "kind": "chat", "max_tokens": 8, "prompt": "Hi", "messages": [{"role": "user", "content": "Hi"}]},
     "prompt", "two prompt sources"),
    ({"id": "x", "kind": "chat", "max_tokens": 8}, "messages", "missing"),
    ({**GOOD, "id": "x", "messages": [{"role": "user", "content": "Hi"}]}, "messages", "only chat cases"),
    ({**GOOD, "id": "x", "stop": "\n"}, "stop", "list of strings, got string"),
    ({**GOOD, "id": "x", "tags": ["ok", 3]}, "tags[1]", "non-empty string, got 3"),
    ({"id": "x", "kind": "completion", "max_tokens": 8, "prompt_words": 10}, "prompt_seed", "go together"),
    ({"id": "x", "kind": "completion", "max_tokens": 8, "prompt_words": 10.5, "prompt_seed": 1}, "prompt_words",
     "integer >= 1"),
    ({"id": "x", "kind": "completion", "max_tokens": 8, "prefix_words": 10, "prefix_seed": 1}, "prompt",
     "followed by a literal prompt"),
    ({"id": "x", "kind": "completion", "max_tokens": 8}, "prompt", "missing"),
    ({"id": "x", "kind": "chat", "max_tokens": 8, "messages": [{"role": "user", "content": "Hi"},
                                                               {"role": "bot", "content": "Hi"}]},
     "messages[1].role", "got 'bot'"),
    ({"id": "x", "kind": "chat", "max_tokens": 8, "messages": [{"role": "user", "content": "Hi"}],
      "tools": [{"type": "function", "function": {"description": "no name"}}]}, "tools[0].function.name", "missing"),
]


@pytest.mark.parametrize(("line", "key", "reason"), BAD_LINES, ids=[f"{k}-{i}" for i, (_, k, _) in enumerate(BAD_LINES)])
def test_a_malformed_line_gives_one_line_naming_file_line_and_key(tmp_path: Path, line: dict[str, Any], key: str,
                                                                   reason: str) -> None:
    path = write_lines(tmp_path / "bad.jsonl", [orjson.dumps(GOOD).decode(), "", orjson.dumps(line).decode()])
    with pytest.raises(CorpusError) as info:
        load_corpus(path)
    msg = str(info.value)
    assert msg == f"{path}:3: {key}: {info.value.reason}" and "\n" not in msg
    assert reason in info.value.reason and info.value.key == key and info.value.line == 3
    assert isinstance(info.value, UsageError) and info.value.exit_code == 2


@pytest.mark.parametrize(("content", "where", "reason"), [
    ("", "", "empty"),
    ("\n  \n\n", "", "empty"),
    ('{"id": "x", "kind": "completion"\n', ":1", "not valid JSON"),
    ('["a", "list"]\n', ":1", "must be a JSON object, got array"),
    ('{"id": "x", "kind": "completion", "max_tokens": 8, "prompt": "\xe9"}\n{"id": 1\n', ":2", "not valid JSON"),
])
def test_files_that_are_not_a_list_of_cases_give_one_line(tmp_path: Path, content: str, where: str,
                                                          reason: str) -> None:
    path = tmp_path / "odd.jsonl"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(CorpusError) as info:
        load_corpus(path)
    assert str(info.value).startswith(f"{path}{where}: ") and reason in str(info.value)
    assert "\n" not in str(info.value)


def test_a_missing_file_is_a_usage_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="nothere.jsonl: cannot read the corpus file"):
        load_corpus(tmp_path / "nothere.jsonl")


@pytest.fixture(scope="module")
def sim() -> Any:
    with SimProcess(SimConfig()) as s:
        yield s


def sim_count(url: str, text: str) -> int:
    req = urllib.request.Request(url + "/tokenize", data=orjson.dumps({"prompt": text}),
                                 headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(req, timeout=30) as r:
        return int(orjson.loads(r.read())["count"])


def test_threshold_and_long_cases_are_ordered_by_length_on_the_simulator_tokenizer(sim: SimProcess) -> None:
    raw = {c["id"]: c for c in raw_cases()}
    corpus = load_corpus(default_corpus_path())
    sized = sorted((raw[c.id]["prompt_words"], c) for c in corpus.cases if "threshold" in c.tags or "long" in c.tags)
    counts = [sim_count(sim.url, c.prompt or "") for _, c in sized]
    assert len(counts) == 13
    assert counts == sorted(counts) and len(set(counts)) == len(counts), list(zip([c.id for _, c in sized], counts, strict=True))
    long_counts = [n for (_, c), n in zip(sized, counts, strict=True) if "long" in c.tags]
    assert len(long_counts) == 3 and min(long_counts) > 8000
    assert max(n for (_, c), n in zip(sized, counts, strict=True) if "threshold" in c.tags) < 8000
