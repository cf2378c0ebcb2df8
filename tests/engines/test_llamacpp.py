"""llama.cpp's `llama-server` (built from the llama-cpp-python sdist) under loadgate's whole gate.

Configurations, all on the project's tiny models (float32 GGUF unless said), greedy:
  f32        1 slot, no speculation: the baseline (`loadgate baseline`)
  draft      1 slot, draft-model speculation (n_max 4): token-exact passes; bit-exact is refused,
             because llama-server gives no real logprob for draft-accepted tokens
  slots4     4 slots, checked and measured with 4 requests in flight
  bf16       bfloat16 weights: the planted real divergence (exit 10, first divergences, bundles,
             replay)
Every first divergence the gate reports is checked against indices computed here from plain
`/completion` answers (`tokens`), and acceptance from per-request `timings` against the
server's own `llamacpp:spec_decode_*` counters. Run with `python -m pytest -q -m engine`.
"""

from __future__ import annotations

import hashlib
import sys
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from loadgate.cli import main
from loadgate.exactness.corpus import Corpus, load_corpus
from loadgate.jsonutil import load_json
from loadgate.records import read_records
from loadgate.servermetrics import delta
from loadgate.summary import snapshot_from_json

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts" / "engines"))
import llama  # noqa: E402

pytestmark = pytest.mark.engine

CASES: list[dict[str, Any]] = [
    {"id": "code-send", "prompt": 'def send_batch(items, size):\n    """Send the batch from items."""\n'},
    {"id": "code-class", "prompt": "class StreamPool:\n    def __init__(self, path):\n        self.path = path\n\n"},
    {"id": "code-count", "prompt": "def count_tokens(text, key):\n"},
    {"id": "code-loop", "prompt": "    for j in range(limit):\n        total += j % 3\n"},
    {"id": "code-stop", "prompt": "def reset_queue(node, count):\n", "stop": ["\n\n"]},
    {"id": "prose-market", "prompt": "The old market turned near the bright city"},
    {"id": "prose-letter", "prompt": "The small letter waited behind the warm window, and the"},
    {"id": "prose-filler", "prompt_words": 40, "prompt_seed": 7, "max_tokens": 24},
]
MAX_TOKENS = 32


@pytest.fixture(scope="module")
def binary() -> Path:
    return llama.binary_path()


@pytest.fixture(scope="module")
def files(models: dict[str, Path]) -> dict[str, Path]:
    """The GGUF files and the tokenizer, from the shared `models` fixture."""
    return {"f32": models["target_f32_gguf"], "bf16": models["target_bf16_gguf"],
            "draft": models["draft_f32_gguf"], "tokenizer": models["target"] / "tokenizer.json"}


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("llamacpp")
    lines = [orjson.dumps({"kind": "completion", "max_tokens": MAX_TOKENS, **c}).decode() for c in CASES]
    (d / "corpus.jsonl").write_text("\n".join(lines) + "\n")
    return d


@pytest.fixture(scope="module")
def corpus(work: Path) -> Corpus:
    return load_corpus(work / "corpus.jsonl")


def config(files: dict[str, Path], **kw: Any) -> llama.LlamaConfig:
    dtype = kw.pop("dtype", "f32")
    if kw.get("speculation") == "draft":
        kw["draft"] = files["draft"]
    return llama.LlamaConfig(model=files[dtype], dtype=dtype, **kw)


@pytest.fixture
def serve(binary: Path, files: dict[str, Path], engine_logs: Path) -> Iterator[Callable[..., Any]]:
    """`serve(**config)` starts a llama-server configuration, stopped when the test ends."""
    started: list[Any] = []

    def start(**kw: Any) -> Any:
        s = llama.start(config(files, **kw), binary=binary, log_dir=engine_logs)
        started.append(s)
        return s

    yield start
    for s in started:
        s.stop()


@pytest.fixture(scope="module")
def profile_for(profile_factory: Callable[..., Path], work: Path) -> Callable[..., Path]:
    """`profile_for(name, server, ...)`: a profile for `server` with this module's corpus and a small
    measured workload (conftest.profile_file), api `llamacpp` (the native `/completion`) unless said."""

    def write(name: str, server: Any, *, baseline: Path | None = None, tier: str = "token-exact",
              scenarios: dict[str, Any] | None = None, api: str = "llamacpp", concurrency: int = 1,
              tokenizer: Path | None = None) -> Path:
        workload: dict[str, Any] = {"requests": 12, "input_len": {"dist": "fixed", "value": 32},
                                    "output_len": {"dist": "fixed", "value": 32}}
        if tokenizer is not None:
            workload["tokenizer"] = str(tokenizer)
        return profile_factory(work, name, server.url, server.info["declared"], work / "corpus.jsonl",
                               baseline=None if baseline is None else str(baseline), contract={"tier": tier},
                               scenarios=scenarios or {"solo": True}, api=api, workload=workload,
                               load={"concurrency": concurrency, "warmup_requests": 2})

    return write


def post(url: str, body: dict[str, Any]) -> dict[str, Any]:
    req = urllib.request.Request(url, data=orjson.dumps(body), headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return orjson.loads(r.read())  # type: ignore[no-any-return]


def plain_ids(server: Any, corpus: Corpus) -> dict[str, list[int]]:
    """Each case's greedy output ids from a plain non-streamed `/completion` (`tokens`), without loadgate."""
    out = {}
    for c in corpus.cases:
        body = {"prompt": c.prompt, "n_predict": c.max_tokens, "temperature": 0.0, "repeat_penalty": 1.0,
                "cache_prompt": False, "return_tokens": True, "stop": list(c.stop), "stream": False}
        out[c.id] = post(server.url + "/completion", body)["tokens"]
    return out


def first_divergence(a: list[int], b: list[int]) -> int | None:
    for k, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return k
    return None if len(a) == len(b) else min(len(a), len(b))


def metrics(server: Any) -> dict[str, float]:
    with urllib.request.urlopen(server.url + "/metrics", timeout=10) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("llamacpp:") and "{" not in line:
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


@pytest.fixture(scope="module")
def baseline(binary: Path, files: dict[str, Path], work: Path, corpus: Corpus, engine_logs: Path,
             profile_for: Callable[..., Path]) -> dict[str, Any]:
    """`loadgate baseline` from f32 without speculation, and the plain ids of the same server."""
    with llama.server(config(files), binary=binary, log_dir=engine_logs) as s:
        p = profile_for("baseline-f32", s)
        assert main(["baseline", str(p), "--out", str(work / "baselines")]) == 0
        ids = plain_ids(s, corpus)
    (path,) = (work / "baselines").glob("baseline-f32-*.json")
    return {"path": path, "doc": load_json(path), "ids": ids}


def test_the_baseline_holds_the_servers_own_ids_and_real_logprobs(baseline):
    cases = baseline["doc"]["cases"]
    assert set(cases) == {c["id"] for c in CASES}
    for cid, rec in cases.items():
        assert rec["output_ids"] == baseline["ids"][cid], cid
        assert rec["placeholders"] == [] and None not in rec["logprobs"]
        assert len(rec["logprobs"]) == len(rec["output_ids"]) and all(len(t) == 2 for t in rec["top_logprobs"])
    assert cases["code-stop"]["finish_reason"] == "stop" or len(cases["code-stop"]["output_ids"]) == MAX_TOKENS


def counter_deltas(server_json: dict[str, Any], level: str) -> dict[str, float | None]:
    """`llamacpp:spec_decode_*` deltas over the measured window, from the run's server.json."""
    before = snapshot_from_json(server_json[level]["before"])
    after = snapshot_from_json(server_json[level]["after"])
    names = ("drafts", "draft_tokens", "accepted_tokens")
    return {n: delta(before, after, f"llamacpp:spec_decode_num_{n}_total") for n in names}


def test_draft_speculation_is_token_exact_and_bit_exact_is_refused_for_draft_positions(
        serve, work, baseline, profile_for, capsys):
    s = serve(speculation="draft")
    bit = profile_for("draft-bit", s, baseline=baseline["path"], tier="bit-exact")
    assert main(["check", str(bit)]) == 10
    out = capsys.readouterr().out
    r = load_json(work / "out" / "draft-bit" / "exactness.json")
    assert r["speculation"]["required"] and r["speculation"]["ran"]
    assert r["speculation"]["counter_drafts_delta"] > 0
    assert r["positions"]["placeholders"] > 0 and r["positions"]["ids_only"] > 0
    # the ids are the baseline's everywhere; what fails is the claim on logprobs
    assert all(n["first_divergence"] is None for n in r["non_identical"])
    assert any("no real logprob value" in (n["why"] or "") for n in r["non_identical"])
    assert "support no bit-exact claim" in out and "placeholder" in out

    tok = profile_for("draft-token", s, baseline=baseline["path"], tier="token-exact")
    code = main(["run", "-q", str(tok)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "exactness check: PASSED" in out and "token-exact" in out
    run = work / "out" / "draft-token"
    r = load_json(run / "exactness.json")
    assert r["passed"] and r["speculation"]["ran"] and r["positions"]["placeholders"] > 0
    assert all(n["first_divergence"] is None for n in r["non_identical"])
    assert_acceptance_reconciles(run)


def assert_acceptance_reconciles(run: Path) -> dict[str, Any]:
    """Per-request `timings` summed over the measured requests equal the server's counter deltas."""
    recs = [r for r in read_records(run / "records.jsonl") if r.get("error") is None]
    assert recs and all(r["spec"] and r["spec"]["source"] == "llama.cpp timings" for r in recs)
    drafted = sum(r["spec"]["draft_tokens"] for r in recs)
    accepted = sum(r["spec"]["accepted"] for r in recs)
    d = counter_deltas(load_json(run / "server.json"), next(iter(load_json(run / "server.json"))))
    assert d["draft_tokens"] == drafted and d["accepted_tokens"] == accepted
    summary = load_json(run / "summary.json")
    level = next(iter(summary["levels"].values()))
    per_req = level["acceptance"]["per_request"]
    assert per_req["accepted"] == accepted and per_req["draft_tokens"] == drafted
    counters_len = 1 + d["accepted_tokens"] / d["drafts"]
    return {"per_request": per_req["acceptance_length"], "counters": counters_len, "drafts": d["drafts"],
            "accepted": accepted, "drafted": drafted, "summary_counters": level["acceptance"].get("counters")}


def test_four_slots_at_four_in_flight_meet_the_contract_and_are_measured(serve, work, baseline, profile_for,
                                                                         capsys):
    s = serve(slots=4)
    p = profile_for("slots4", s, baseline=baseline["path"], tier="bit-exact",
                      scenarios={"solo": True, "concurrent": 4}, concurrency=4)
    code = main(["run", "-q", str(p)])
    out = capsys.readouterr().out
    assert code == 0, out
    r = load_json(work / "out" / "slots4" / "exactness.json")
    assert r["passed"] and set(r["verdicts"]) == {"identical"}
    assert r["scenarios"]["concurrent:4"]["in_flight"] == 4 and r["positions"]["ids_only"] == 0
    summary = load_json(work / "out" / "slots4" / "summary.json")
    level = summary["levels"]["4"]
    assert level["token_counts"]["ok"] and summary["valid"]


def test_bf16_weights_diverge_where_the_plain_outputs_say_with_bundles_and_replay(
        serve, work, corpus, baseline, profile_for, capsys):
    s = serve(dtype="bf16")
    expected = {cid: first_divergence(baseline["ids"][cid], ids) for cid, ids in plain_ids(s, corpus).items()}
    diverging = {cid: k for cid, k in expected.items() if k is not None}
    assert diverging, "bf16 gave the f32 tokens on every case: the planted divergence is gone"
    p = profile_for("bf16", s, baseline=baseline["path"], tier="token-exact")
    assert main(["check", str(p)]) == 10
    out = capsys.readouterr().out
    r = load_json(work / "out" / "bf16" / "exactness.json")
    reported = {n["case"]: n["first_divergence"] for n in r["non_identical"] if n["first_divergence"] is not None}
    assert reported == diverging
    for n in r["non_identical"]:
        if n["first_divergence"] is not None:
            k = n["first_divergence"]
            assert n["baseline_token"] == baseline["ids"][n["case"]][k] and not n["passed"]
            assert f"{n['baseline_token']} → {n['candidate_token']}" in out
    bundles = sorted((work / "out" / "bf16" / "divergences").glob("*.json"))
    assert len(bundles) == len(r["non_identical"])
    case, k = sorted(diverging.items())[0]
    bundle = next(b for b in bundles if f"-{case}-" in b.name)
    assert main(["replay", str(bundle), "--times", "2"]) == 10
    assert capsys.readouterr().out.count(f"diverges at token {k}") == 2


def test_fingerprint_reads_props_and_changes_with_the_slot_count(serve, work, profile_for, capsys):
    one = serve(slots=1)
    p1 = profile_for("fp1", one)
    assert main(["fingerprint", str(p1)]) == 0
    doc = orjson.loads(capsys.readouterr().out)
    props = post_get(one.url + "/props")
    engine = doc["fingerprint"]["engine"]
    assert engine["props"]["build_info"] == props["build_info"] and engine["props"]["total_slots"] == 1
    assert engine["props"]["chat_template_sha256"] == hashlib.sha256(props["chat_template"].encode()).hexdigest()
    assert doc["fingerprint"]["declared"]["model_sha256"] == llama.sha256_file(one.info["config"].model)
    saved = work / "fp1.json"
    saved.write_bytes(orjson.dumps(doc))
    assert main(["fingerprint", str(p1), "--against", str(saved)]) == 0
    assert "identical fingerprints" in capsys.readouterr().out
    four = serve(slots=4)
    p4 = profile_for("fp4", four)
    assert main(["fingerprint", str(p4), "--against", str(saved)]) == 0
    out = capsys.readouterr().out
    assert "engine.props.total_slots: 1 -> 4" in out and "declared.slots: '1' -> '4'" in out


def post_get(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=10) as r:
        return orjson.loads(r.read())  # type: ignore[no-any-return]


def send(url: str, api: str, req: Any) -> Any:
    """One request through loadgate's own transport and adapter; the decoded response."""
    from loadgate.attack import Target, TargetSpec, decode, fetch, make_session
    from loadgate.runner import run_async

    async def go() -> Any:
        async with make_session() as session:
            t = Target(TargetSpec(url, api, "tiny", 120.0, stream=req.stream), session)
            try:
                raw = await fetch(t, orjson.dumps(t.adapter.build_body(req, "tiny")), "llamacpp-test")
            finally:
                if t.pool is not None:
                    t.pool.close()
            return decode(t.adapter, req.stream, raw)

    return run_async(go())


def gen(case: Any, stream: bool, logprobs: int | None = 2) -> Any:
    from loadgate.engines.base import GenRequest

    return GenRequest(max_tokens=case.max_tokens, prompt_text=case.prompt, ignore_eos=False, stop=case.stop,
                      logprobs=logprobs, stream=stream)


def test_native_stream_and_body_decode_to_the_same_ids_timings_and_placeholders(serve, corpus):
    s = serve(speculation="draft")
    plain = plain_ids(s, corpus)
    placeholders = 0
    for c in corpus.cases:
        ds, db = send(s.url, "llamacpp", gen(c, True)), send(s.url, "llamacpp", gen(c, False))
        assert ds.error is None and db.error is None
        assert ds.output_ids == db.output_ids == plain[c.id], c.id
        assert ds.token_source == "ids" and sum(ch.n_tokens for ch in ds.chunks) == len(ds.output_ids)
        assert [i for ch in ds.chunks for i in ch.ids] == ds.output_ids
        assert ds.completion_tokens == db.completion_tokens == len(plain[c.id])
        assert ds.finish_reason == db.finish_reason and ds.finish_reason in ("stop", "length")
        assert ds.spec is not None and db.spec is not None and ds.spec.source == "llama.cpp timings"
        assert (ds.spec.draft_tokens, ds.spec.accepted) == (db.spec.draft_tokens, db.spec.accepted)
        # placeholders: missing probabilities in the stream, 0.0 with an empty top list in the body
        assert ds.placeholder_positions == db.placeholder_positions
        real = [k for k in range(len(ds.output_ids)) if k not in set(ds.placeholder_positions)]
        assert [ds.logprobs[k] for k in real] == [db.logprobs[k] for k in real]
        assert all(ds.logprobs[k] is None and ds.top_logprobs[k] == [] for k in ds.placeholder_positions)
        assert 0 in real  # the first token comes from the prompt's forward pass: always a real value
        placeholders += len(ds.placeholder_positions)
    assert placeholders > 0
