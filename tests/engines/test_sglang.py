"""The whole gate against a real SGLang 0.5.23 server on CPU, serving the project's tiny model.

SGLang's kernel package is CUDA-only on PyPI: the server runs with loadgate's `sgl_kernel` import
shim (scripts/engines/sgl_kernel_shim/), whose every function raises and logs its name. The log
is checked after every server start and every test, and the session fails if it holds a call
(`sgl_kernel_guard.py`): nothing here can pass on a stubbed computation.

One server runs at a time (two shared cores), started once per configuration in this order:
float32 without the prefix (radix) cache (the baseline; bit-exact one request at a time,
token-exact batched), float32 with it (SGLang's default: token-exact), float16 (logprobs moved by
thousandths, one near-tie divergence), bfloat16 (diverging ids), float32 again (a second start,
for the fingerprint's volatile fields), then the two speculative methods that fail to start.
loadgate is driven through `loadgate.cli.main` as a user would; what it extracted is checked
against plain requests sent here with urllib.

The corpus is reduced for this engine's speed on 2 shared cores (tens to a few hundred tokens/s,
depending on what else runs): 6 completion cases of 16 to 24 output tokens. Chat cases are left out of the gate
because SGLang's /v1/chat/completions cannot give loadgate token ids (a test below shows what it
does instead). Speculative decoding cannot run on this CPU (SGLang's CPU speculative path needs
kernels that only build from SGLang's repository; a test below shows both methods failing to
start), so the per-request `spec_verify_ct` / `spec_accept_length` fields stay tested on
hand-written shapes (tests/engine/test_adapters_fixtures.py, tests/analysis/test_specdec.py).

Facts measured on each run are appended to `<engine_logs>/sglang-facts.jsonl`.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import struct
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import common  # noqa: E402  (scripts/engines is on sys.path: tests/engines/conftest.py)
import orjson
import pytest

from loadgate.analysis.specdec import contamination
from loadgate.analysis.summary import build_summary
from loadgate.cli import main
from loadgate.engine.adapters import FAMILIES, family_for
from loadgate.gate.fingerprint import VOLATILE_KEYS
from loadgate.jsonutil import load_json
from loadgate.records import read_records
from loadgate.snapshot import Snapshot, delta, first_name, parse_metrics, snapshot_from_json

from .conftest import _skip, first_difference, load_script, post_json
from .sgl_kernel_guard import fail_if_shim_called, shim_calls

pytestmark = pytest.mark.engine
sglang_engine = load_script("sglang", "sglang_engine")

MAX_TOKENS = 16
CORPUS: list[dict[str, Any]] = [
    {"id": "prose-river", "kind": "completion", "max_tokens": 24, "prompt": "The quiet river walked over the old garden"},
    {"id": "prose-story", "kind": "completion", "max_tokens": 24,
     "prompt": "Once upon a time, in a small village by the sea, there lived"},
    {"id": "code-def", "kind": "completion", "max_tokens": MAX_TOKENS, "prompt": "def load_cache(data, limit):"},
    {"id": "code-method", "kind": "completion", "max_tokens": MAX_TOKENS,
     "prompt": "class TokenQueue:\n    def __init__(self, size):\n        self.size = size\n\n    def"},
    {"id": "code-branch", "kind": "completion", "max_tokens": MAX_TOKENS,
     "prompt": "def merge_index(tu, value):\n    result = tu + value\n    if result"},
    {"id": "unicode", "kind": "completion", "max_tokens": MAX_TOKENS,
     "prompt": "Les élèves ont écrit : « Le matin, la rivière"},
]
# one request at a time (alone, then 8 repeats): what float32 holds bit-exact
SERIAL = {"solo": True, "repeat": 8, "repeat_batch": 1}
# with others in flight: batched decode steps move float32 logprobs by ULPs (ids stay)
BATCHED = {"solo": True, "concurrent": 4, "repeat": 8, "repeat_batch": 4}
MEASURED = 8  # requests in the performance phase (16 output tokens each, 2 in flight)
# SGLang gzips /metrics for a client that accepts gzip, and its gauge `sglang:fwd_occupancy` reads
# NaN on this CPU. loadgate's scrape asks for plain text (and would decompress) and leaves NaN
# samples out; before that fix it read no counter at all, and the NaN (written to server.json as
# null) broke the run's summary (exit 1). The profiles here set no header of their own.
NAN_GAUGES = {"sglang:fwd_occupancy"}


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=30) as r:
        return json.loads(r.read())


def get_text(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as r:
        return str(r.read().decode())


class OneServer:
    """SGLang variants on demand, one at a time: asking for another stops the current one. Each
    start's raw `/server_info` is kept (for the fingerprint's volatile fields), and the shim log is
    checked right after every start (SGLang runs a warmup request while starting)."""

    def __init__(self, model_dir: Path, logs: Path, shim_log: Path) -> None:
        self.model_dir = str(model_dir)
        self.logs = logs
        self.shim_log = shim_log
        self.current: Any = None
        self.starts: list[dict[str, Any]] = []

    def get(self, variant: str, *, fresh: bool = False) -> Any:
        cur = self.current
        if not fresh and cur is not None and cur.info["variant"] == variant and cur.alive():
            return cur
        self.close()
        self.current = sglang_engine.start(variant, self.model_dir, shim_log=self.shim_log, log_dir=self.logs)
        fail_if_shim_called(self.shim_log, f"while SGLang {variant} started (log {self.current.log_path})")
        self.starts.append({"variant": variant, "ready_s": self.current.ready_s,
                            "server_info": get_json(self.current.url + "/server_info")})
        return self.current

    def close(self) -> None:
        if self.current is not None:
            self.current.stop()
            self.current = None


@pytest.fixture(scope="module")
def servers(models: dict[str, Path], engine_logs: Path, sgl_kernel_shim_log: Path) -> Iterator[OneServer]:
    if not sglang_engine.venv_python().exists():
        _skip(f"no SGLang venv at {sglang_engine.venv_python().parent.parent}: run scripts/engines/setup_sglang.sh")
    s = OneServer(models["target"], engine_logs, sgl_kernel_shim_log)
    try:
        yield s
    finally:
        s.close()


@pytest.fixture(autouse=True)
def no_shim_call_in_this_test(sgl_kernel_shim_log: Path) -> Iterator[None]:
    """Fail the very test during which a shim function was called (the session fails too)."""
    before = len(shim_calls(sgl_kernel_shim_log))
    yield
    if len(shim_calls(sgl_kernel_shim_log)) > before:
        fail_if_shim_called(sgl_kernel_shim_log, "during this test")


def note(logs: Path, **facts: Any) -> None:
    """Append measured facts to the session's facts file (read by people, not by tests)."""
    with open(logs / "sglang-facts.jsonl", "a") as f:
        f.write(json.dumps(facts, sort_keys=True, default=str) + "\n")


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("sglang")
    (d / "corpus.jsonl").write_text("".join(json.dumps(c, ensure_ascii=False, sort_keys=True) + "\n" for c in CORPUS))
    return d


def cli(*args: str) -> tuple[int, str]:
    """`loadgate ARGS` through `main`, with its standard output."""
    return cli_both(*args)[:2]


def cli_both(*args: str) -> tuple[int, str, str]:
    """`loadgate ARGS` through `main`, with its standard output and standard error."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def profile_for(profile_factory: Callable[..., Path], work: Path) -> Callable[..., Path]:
    """`profile_for(name, server, ...)`: a profile with this module's corpus and a small measured
    workload (8 requests of 32 prompt + 16 output tokens, 2 in flight, 2 warmup)."""

    def write(name: str, server: Any, *, api: str = "sglang", baseline: Path | None = None, tier: str = "bit-exact",
              scenarios: dict[str, Any] | None = None, corpus: Path | None = None,
              headers: dict[str, str] | None = None, **contract: Any) -> Path:
        workload = {"requests": MEASURED, "input_len": {"dist": "fixed", "value": 32},
                    "output_len": {"dist": "fixed", "value": MAX_TOKENS}}
        return profile_factory(work, name, server.url, server.info["declared"], corpus or work / "corpus.jsonl",
                               baseline=None if baseline is None else str(baseline),
                               contract={"tier": tier, **contract}, scenarios=scenarios or {"solo": True}, api=api,
                               workload=workload, load={"concurrency": 2, "warmup_requests": 2}, headers=headers)

    return write


def plain(srv: Any, case: dict[str, Any]) -> tuple[list[int], list[float], dict[str, Any]]:
    """Re-send a baseline case's request body unstreamed with urllib, to the same route; the ids,
    their logprobs and the raw answer."""
    path = urlsplit(case["route"]).path
    body = {k: v for k, v in case["request"].items() if k not in ("stream", "stream_options")}
    answer = post_json(srv.url + path, body)
    if path == "/generate":
        meta = answer["meta_info"]
        return list(answer["output_ids"]), [e[0] for e in meta["output_token_logprobs"]], answer
    choice = answer["choices"][0]
    return list(choice["token_ids"]), list(choice["logprobs"]["token_logprobs"]), answer


def ulps(a: float, b: float) -> int:
    """Distance in float32 ULPs (the logprobs are float32 values printed as float64)."""
    def key(x: float) -> int:
        i = struct.unpack("<i", struct.pack("<f", x))[0]
        return i if i >= 0 else -(i & 0x7FFFFFFF)
    return abs(key(a) - key(b))


def baseline_of(cli_out: str) -> Path:
    return Path(cli_out.strip().splitlines()[-1])


def server_window(run: Path, level: str) -> tuple[Snapshot, Snapshot]:
    """The counters loadgate scraped at the measured window's boundaries (server.json), read the
    way its summary reads them; the NaN gauge is not among them."""
    doc = load_json(run / "server.json")[level]
    assert doc["before"] is not None and doc["after"] is not None, "loadgate read no /metrics of the server"
    for side in ("before", "after"):
        names = {name for name, _, _ in doc[side]}
        assert not names & NAN_GAUGES and all(value is not None for _, _, value in doc[side])
    return snapshot_from_json(doc["before"]), snapshot_from_json(doc["after"])


# ------------------------------------------------------------------------------- float32
@pytest.fixture(scope="module")
def baseline(servers: OneServer, profile_for: Callable[..., Path], work: Path) -> dict[str, Any]:
    """`loadgate baseline` on float32 through the native /generate (api: sglang)."""
    srv = servers.get("f32")
    code, out = cli("baseline", str(profile_for("sglang-f32", srv)), "--out", str(work / "baselines"))
    assert code == 0, out
    return {"path": baseline_of(out), "doc": load_json(baseline_of(out))}


@pytest.fixture(scope="module")
def baseline_v1(servers: OneServer, profile_for: Callable[..., Path], work: Path) -> dict[str, Any]:
    """`loadgate baseline` on float32 through /v1/completions (api: openai-completions)."""
    srv = servers.get("f32")
    code, out = cli("baseline", str(profile_for("sglang-f32-v1", srv, api="openai-completions")),
                    "--out", str(work / "baselines-v1"))
    assert code == 0, out
    return {"path": baseline_of(out), "doc": load_json(baseline_of(out))}


def test_baseline_through_generate_holds_the_ids_and_logprobs_of_plain_requests(servers, baseline, engine_logs):
    cases = baseline["doc"]["cases"]
    assert set(cases) == {c["id"] for c in CORPUS}
    srv = servers.get("f32")
    finish = {}
    for cid, case in cases.items():
        assert urlsplit(case["route"]).path == "/generate" and case["request"]["stream"] is True
        ids, lps = case["output_ids"], case["logprobs"]
        assert ids and len(lps) == len(ids) and all(isinstance(v, float) for v in lps), cid
        # native top-k alternatives carry ids: the first is the token itself
        assert all(len(top) == 2 and top[0][0] == tok for top, tok in zip(case["top_logprobs"], ids, strict=True))
        p_ids, p_lps, answer = plain(srv, case)
        assert p_ids == ids, f"{cid}: streamed ids extracted by loadgate differ from a plain request's"
        assert p_lps == lps, f"{cid}: streamed logprobs extracted by loadgate differ from a plain request's"
        # SGLang's finish_reason is an object; loadgate keeps its type
        fr = answer["meta_info"]["finish_reason"]
        assert isinstance(fr, dict) and fr["type"] == case["finish_reason"] in ("length", "stop"), (cid, fr)
        finish[cid] = fr
    assert any(fr == {"type": "length", "length": 16} for fr in finish.values())
    note(engine_logs, test="baseline", cases=len(cases), tokens=sum(len(c["output_ids"]) for c in cases.values()),
         finish_reasons=finish, ready_s=servers.starts[0]["ready_s"])


def test_v1_completions_gives_the_native_ids_and_loadgate_reads_them(servers, baseline, baseline_v1, engine_logs):
    """/v1/completions with `return_token_ids` streams the ids (`choices[].token_ids`) and
    `token_logprobs`; its top alternatives are keyed by text, not ids (SGLang has no
    `return_tokens_as_token_ids`), so loadgate records them with id -1."""
    native, v1 = baseline["doc"]["cases"], baseline_v1["doc"]["cases"]
    srv = servers.get("f32")
    worst = 0
    for cid, case in v1.items():
        assert urlsplit(case["route"]).path == "/v1/completions"
        assert case["output_ids"] == native[cid]["output_ids"], cid
        p_ids, p_lps, _ = plain(srv, case)
        assert (p_ids, p_lps) == (case["output_ids"], case["logprobs"]), cid
        assert all(top[0][0] == -1 for top in case["top_logprobs"])
        worst = max([worst] + [ulps(a, b) for a, b in zip(case["logprobs"], native[cid]["logprobs"], strict=True)])
    note(engine_logs, test="v1-completions", max_ulp_v1_vs_generate=worst)


@pytest.fixture(scope="module")
def f32_run(servers, baseline, profile_for, work) -> dict[str, Any]:
    """`loadgate run` on float32 (api: sglang): the bit-exact check alone and repeated one at a
    time, then the performance phase."""
    srv = servers.get("f32")
    p = profile_for("f32-run", srv, baseline=baseline["path"], scenarios=SERIAL)
    code, out, err = cli_both("run", "-q", str(p))
    out += err
    run = work / "out" / "f32-run"
    return {"code": code, "out": out, "dir": run, "ex": load_json(run / "exactness.json")}


def test_float32_is_bit_exact_alone_and_repeated_one_at_a_time(f32_run, engine_logs):
    ex = f32_run["ex"]
    assert ex["passed"] and ex["contract"]["tier"] == "bit-exact", (f32_run["out"], ex["non_identical"][:3])
    assert (f32_run["dir"] / "attestation.json").exists() and (f32_run["dir"] / "records.jsonl").exists()
    assert set(ex["scenarios"]) == {"solo", "repeat:8x1"}, ex["scenarios"]
    assert set(ex["verdicts"]) == {"identical"} and ex["verdicts"]["identical"] == len(CORPUS) + 8
    assert ex["non_identical"] == []
    assert ex["positions"]["ids_only"] == 0 and ex["positions"]["logprob"] == ex["positions"]["compared"] > 0
    assert not ex["speculation"]["required"]
    note(engine_logs, test="f32-check", verdicts=ex["verdicts"], positions=ex["positions"], scenarios=ex["scenarios"])


def test_float32_with_others_in_flight_keeps_every_id_but_moves_logprobs_so_it_is_token_exact(
        servers, baseline, profile_for, work, engine_logs):
    """Batched with other requests, a sequence's decode steps run on other matrix shapes: its ids
    stay the baseline's and its logprobs move by float32 ULPs (up to 127 in the runs seen here).
    Bit-exact fails on `equivalent` sequences of the batched scenarios only, never alone;
    token-exact passes. (Whether a batch changes a value depends on how the requests overlap.)"""
    srv = servers.get("f32")
    code, out = cli("check", str(profile_for("f32-batched-bit", srv, baseline=baseline["path"], scenarios=BATCHED)))
    ex = load_json(work / "out" / "f32-batched-bit" / "exactness.json")
    assert code in (0, 10) and (code == 10) == bool(ex["non_identical"]), out
    assert all(n["scenario"] != "solo" and n["verdict"] == "equivalent" and n["first_divergence"] is None
               for n in ex["non_identical"])
    assert ex["positions"]["ids_only"] == 0
    code_t, out_t = cli("check", str(profile_for("f32-batched-token", srv, baseline=baseline["path"], tier="token-exact",
                                                 scenarios=BATCHED)))
    assert code_t == 0, out_t
    note(engine_logs, test="f32-batched", bit_exact_exit=code, verdicts=ex["verdicts"],
         max_ulp=max([n["max_ulp"] for n in ex["non_identical"]] or [0]),
         non_identical=[(n["scenario"], n["case"], n["in_flight"], n["max_ulp"]) for n in ex["non_identical"]],
         token_exact_exit=code_t)


def test_performance_phase_reads_sglang_counters_and_finds_the_window_clean(f32_run, engine_logs):
    """loadgate's contamination check (analysis/specdec.contamination) on the run's own files:
    Δ`sglang:generation_tokens_total` over the measured window equals the tokens the client
    received; requests and prompt tokens agree with the plan too."""
    before, after = server_window(f32_run["dir"], "2")
    assert family_for("openai-completions", after) is FAMILIES["sglang"]
    assert first_name(after, (FAMILIES["sglang"].generated,)) == "sglang:generation_tokens_total"
    records = [r for r in read_records(f32_run["dir"] / "records.jsonl") if r.level == 2]
    assert len(records) == MEASURED and all(r.succeeded and r.output_tokens == MAX_TOKENS for r in records)
    cc = contamination(before, after, records, family_for("openai-completions", after))
    assert cc is not None and cc["clean"], cc
    assert cc["server_generation_tokens"] == cc["client_generation_tokens"] == MEASURED * MAX_TOKENS
    assert delta(before, after, "sglang:num_requests_total") == MEASURED
    assert delta(before, after, "sglang:prompt_tokens_total") == MEASURED * 32
    gauges = load_json(f32_run["dir"] / "server.json")["2"]["gauges"]
    assert gauges["running"] is not None and gauges["running"]["max"] <= 2  # sampled: may catch none running
    window_s = (max(r.end_ns for r in records) - min(r.start_ns for r in records)) / 1e9
    note(engine_logs, test="performance", contamination=cc, gauges=gauges, run_exit=f32_run["code"],
         ttft_s=sorted(round(r.chunk_ns[0] / 1e9, 3) for r in records if r.chunk_ns),  # chunk_ns: from start_ns
         decode_tokens_per_s_per_stream=sorted(round((len(r.chunk_ns) - 1) / ((r.chunk_ns[-1] - r.chunk_ns[0]) / 1e9), 1)
                                               for r in records if len(r.chunk_ns) > 1  # one read: no rate
                                               and r.chunk_ns[-1] > r.chunk_ns[0]),
         output_tokens_per_s=round(MEASURED * MAX_TOKENS / window_s, 1))


def test_loadgate_run_against_sglang_ends_with_a_summary_and_a_clean_window(f32_run):
    """The whole run passes (exit 0) and its summary holds the contamination check on SGLang's
    counters (it failed with exit 1 on SGLang's NaN gauge before)."""
    assert f32_run["code"] == 0, f32_run["out"][-500:]
    lv = build_summary(f32_run["dir"]).levels["2"]
    assert lv.contamination is not None and lv.contamination["clean"], lv.contamination
    assert lv.contamination["server_generation_tokens"] == MEASURED * MAX_TOKENS


def test_the_check_through_v1_completions_is_bit_exact_too(servers, baseline_v1, profile_for, work):
    srv = servers.get("f32")
    p = profile_for("f32-v1-check", srv, api="openai-completions", baseline=baseline_v1["path"], scenarios=SERIAL)
    code, out = cli("check", str(p))
    ex = load_json(work / "out" / "f32-v1-check" / "exactness.json")
    assert code == 0, (out, ex["non_identical"][:3])
    assert set(ex["verdicts"]) == {"identical"} and ex["positions"]["logprob"] > 0


def test_seeded_sampling_differs_from_run_to_run_while_greedy_repeats(servers, engine_logs):
    """The same `temperature` 0.8 request with `sampling_seed` 7 (native) or `seed` 7 (/v1), sent
    twice, gives other tokens the second time: SGLang's seed does not make sampling repeatable
    here, so only greedy outputs are compared by the gate. Greedy repeats exactly."""
    srv = servers.get("f32")
    prompt = "The quiet river walked over the old garden"
    native = {"text": prompt, "sampling_params": {"max_new_tokens": 16, "temperature": 0.8, "sampling_seed": 7}}
    v1 = {"model": "tiny", "prompt": prompt, "max_tokens": 16, "temperature": 0.8, "seed": 7, "return_token_ids": True}
    a, b = (post_json(srv.url + "/generate", native)["output_ids"] for _ in range(2))
    c, d = (post_json(srv.url + "/v1/completions", v1)["choices"][0]["token_ids"] for _ in range(2))
    assert a != b and c != d, "seeded sampling repeated itself: this SGLang honours the seed now"
    greedy = {"text": prompt, "sampling_params": {"max_new_tokens": 16, "temperature": 0.0}, "return_logprob": True}
    g1, g2 = (post_json(srv.url + "/generate", greedy) for _ in range(2))
    assert g1["output_ids"] == g2["output_ids"]
    assert g1["meta_info"]["output_token_logprobs"] == g2["meta_info"]["output_token_logprobs"]
    note(engine_logs, test="seeded-sampling", native=[a, b], v1=[c, d],
         first_difference_native=first_difference(a, b), first_difference_v1=first_difference(c, d))


def test_chat_cannot_give_loadgate_ids_so_a_chat_case_fails_the_baseline_instead_of_passing(
        servers, profile_for, work, engine_logs):
    """SGLang's /v1/chat/completions refuses `return_token_ids` on a stream (HTTP 400, which
    loadgate's `openai-chat` sends streamed), and unstreamed puts the ids in `response_token_ids`
    (where `openai-chat` does not look): loadgate cannot check SGLang's chat route today, and says
    so with an error rather than comparing nothing."""
    srv = servers.get("f32")
    msgs = [{"role": "user", "content": "How do I merge the cache?"}]
    body = {"model": "tiny", "messages": msgs, "max_tokens": 4, "temperature": 0.0, "return_token_ids": True}
    req = urllib.request.Request(srv.url + "/v1/chat/completions", data=json.dumps({**body, "stream": True}).encode(),
                                 headers={"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(req, timeout=60)
    with err.value:  # (its response stays open until closed)
        assert err.value.code == 400 and "return_token_ids is not supported with streaming" in err.value.read().decode()
    unstreamed = post_json(srv.url + "/v1/chat/completions", body)["choices"][0]
    assert len(unstreamed["response_token_ids"]) == 4 and "token_ids" not in unstreamed
    corpus = work / "chat.jsonl"
    corpus.write_text(json.dumps({"id": "chat-one", "kind": "chat", "max_tokens": 4, "messages": msgs}) + "\n")
    code, out, err = cli_both("baseline", str(profile_for("chat-baseline", srv, corpus=corpus)),
                              "--out", str(work / "chat-bl"))
    assert code != 0 and not list((work / "chat-bl").glob("*.json")), out + err
    assert "1 case(s) failed on the baseline engine (first: chat-one)" in err, out + err
    note(engine_logs, test="chat", baseline_exit=code, output=(out + err)[-600:])


def test_loadgate_reads_sglangs_counters_although_it_gzips_its_metrics(servers):
    """SGLang answers /metrics gzip-compressed to a client that accepts gzip; loadgate's scrape,
    through a session with no header of its own, still reads every counter (before the fix it
    read nothing and said nothing)."""
    from loadgate.net.connect import run_async
    from loadgate.net.http import make_session
    from loadgate.net.scrape import scrape

    srv = servers.get("f32")

    async def read() -> Any:
        async with make_session() as session:
            return await scrape(session, srv.url + "/metrics")

    req = urllib.request.Request(srv.url + "/metrics", headers={"Accept-Encoding": "gzip"})
    with urllib.request.urlopen(req, timeout=30) as r:
        assert r.headers["Content-Encoding"] == "gzip"
    snap = run_async(read())
    assert snap is not None and snap.total("sglang:generation_tokens_total") is not None
    assert snap.total("sglang:fwd_occupancy") is None  # NaN on this CPU: left out


@pytest.fixture(scope="module")
def fingerprint_f32(servers, profile_for, work) -> dict[str, Any]:
    srv = servers.get("f32")
    code, out = cli("fingerprint", str(profile_for("fp-f32", srv)))
    assert code == 0, out
    (work / "fp-f32.json").write_text(out)
    return dict(orjson.loads(out))


def test_fingerprint_reads_server_info(servers, fingerprint_f32):
    info = fingerprint_f32["fingerprint"]["engine"]["server_info"]
    assert info["version"] == "0.5.23" and info["dtype"] == "float32" and info["device"] == "cpu"
    assert info["attention_backend"] == "torch_native" and info["random_seed"] == 0
    assert not set(info) & VOLATILE_KEYS
    assert fingerprint_f32["fingerprint"]["engine"]["models"] == [
        {"id": "tiny", "root": "tiny", "parent": None, "max_model_len": 2048}]
    assert fingerprint_f32["fingerprint"]["engine"]["metrics_labels"]["model_name"] == ["tiny"]


# ------------------------------------------------------- float32 with the prefix cache on
@pytest.fixture(scope="module")
def radix(servers, baseline, profile_for, work) -> dict[str, Any]:
    """SGLang's default, the radix (prefix) cache on: a bit-exact check alone and repeated one at a
    time, then `loadgate run` token-exact with requests batched."""
    srv = servers.get("f32-radix")
    code, out = cli("check", str(profile_for("radix-bit", srv, baseline=baseline["path"], scenarios=SERIAL)))
    bit = {"code": code, "out": out, "ex": load_json(work / "out" / "radix-bit" / "exactness.json")}
    p = profile_for("radix-run", srv, baseline=baseline["path"], tier="token-exact", scenarios=BATCHED)
    code, out, err = cli_both("run", "-q", str(p))
    out += err
    return {"bit": bit, "run": {"code": code, "out": out, "dir": work / "out" / "radix-run"}}


def test_the_prefix_cache_moves_logprobs_by_ulps_only_so_it_is_token_exact_not_bit_exact(radix, engine_logs):
    """A prompt whose prefix is cached (SGLang's warmup request at start, an earlier prompt, the same
    prompt again) is prefilled over fewer tokens: other matrix shapes, and its logprobs move by
    float32 ULPs even one request at a time. The ids never change: bit-exact fails on `equivalent`
    sequences only; token-exact passes, batched too."""
    ex = radix["bit"]["ex"]
    assert radix["bit"]["code"] == 10 and ex["non_identical"], radix["bit"]["out"]
    assert all(n["verdict"] == "equivalent" and n["first_divergence"] is None for n in ex["non_identical"])
    assert ex["positions"]["ids_only"] == 0
    token = load_json(radix["run"]["dir"] / "exactness.json")
    assert token["passed"] and token["contract"]["tier"] == "token-exact", radix["run"]["out"]
    assert set(token["verdicts"]) <= {"identical", "equivalent"}
    note(engine_logs, test="radix", bit_exact_exit=radix["bit"]["code"], verdicts=ex["verdicts"],
         non_identical=[(n["scenario"], n["case"], n["max_ulp"]) for n in ex["non_identical"]])


def test_loadgate_records_the_prefix_cache_counter_of_the_measured_window(radix, engine_logs):
    """The prefix-cache counter is in the snapshots loadgate keeps of the measured window (loadgate's
    random prompts share no prefix, so its delta there is small or 0; another issue will use it)."""
    run = radix["run"]["dir"]
    before, after = server_window(run, "2")
    cached = delta(before, after, "sglang:cached_tokens_total")
    assert after.total("sglang:cached_tokens_total", cache_source="device") is not None
    assert cached is not None and cached >= 0
    records = [r for r in read_records(run / "records.jsonl") if r.level == 2]
    cc = contamination(before, after, records, family_for("openai-completions", after))
    assert cc is not None and cc["clean"], cc
    note(engine_logs, test="radix-counters", cached_tokens_delta=cached,
         cached_tokens_total=after.total("sglang:cached_tokens_total"))


def test_a_repeated_prompt_reports_cached_tokens_that_the_prefix_cache_counter_adds_up(servers, engine_logs):
    """`meta_info.cached_tokens` of a repeated prompt is its length less one (the radix cache keeps
    the prefix; the last token is computed again) and `sglang:cached_tokens_total` grows by it."""
    srv = servers.get("f32-radix")
    body = {"text": "The small letter waited behind the warm window, and the",
            "sampling_params": {"max_new_tokens": 2, "temperature": 0.0}}
    first = post_json(srv.url + "/generate", body)["meta_info"]
    m0 = parse_metrics(get_text(srv.url + "/metrics"))
    second = post_json(srv.url + "/generate", body)["meta_info"]
    m1 = parse_metrics(get_text(srv.url + "/metrics"))
    assert second["cached_tokens"] == second["prompt_tokens"] - 1 > first["cached_tokens"]
    assert second["cached_tokens_details"]["device"] == second["cached_tokens"]
    assert delta(m0, m1, "sglang:cached_tokens_total") == second["cached_tokens"]
    note(engine_logs, test="cached-tokens", first=first["cached_tokens"], second=second["cached_tokens"],
         prompt_tokens=second["prompt_tokens"])


# ------------------------------------------------------------------------------- float16
def check_candidate(variant: str, tier: str, servers, baseline, profile_for, work, **contract: Any) -> dict[str, Any]:
    srv = servers.get(variant)
    name = f"{variant}-{tier}"
    code, out = cli("check", str(profile_for(name, srv, baseline=baseline["path"], tier=tier, **contract)))
    return {"code": code, "out": out, "ex": load_json(work / "out" / name / "exactness.json"), "dir": work / "out" / name}


def plain_differences(srv: Any, baseline: dict[str, Any]) -> dict[str, Any]:
    """Per case, from plain requests: the first divergence from the baseline's ids (None when the
    ids are the same) and, where they are, the largest logprob difference in nats and ULPs."""
    out = {}
    for cid, case in baseline["doc"]["cases"].items():
        ids, lps, _ = plain(srv, case)
        fd = first_difference(case["output_ids"], ids)
        n = len(ids) if fd is None else fd
        pairs = list(zip(case["logprobs"][:n], lps[:n], strict=True))
        out[cid] = {"first_divergence": fd, "max_abs": max(abs(a - b) for a, b in pairs) if pairs else 0.0,
                    "max_ulp": max(ulps(a, b) for a, b in pairs) if pairs else 0}
    return out


def listed_divergences(ex: dict[str, Any]) -> dict[str, int]:
    return {n["case"]: n["first_divergence"] for n in ex["non_identical"] if n["first_divergence"] is not None}


def test_float16_moves_logprobs_by_thousandths_and_diverges_only_at_a_near_tie(
        servers, baseline, profile_for, work, engine_logs):
    """float16 keeps the ids of most cases and moves their logprobs by a few thousandths of a nat
    (`equivalent`: a bit-exact failure on values only); where the baseline's top-2 gap was ~0.001
    nats it can pick the other token (a `near-tie divergence`), so token-exact fails there and a
    near-tie-tolerant contract passes with a gap of twice the largest move float16 made (at least
    0.002 nats). First divergences match plain requests."""
    bit = check_candidate("f16", "bit-exact", servers, baseline, profile_for, work)
    srv = servers.get("f16")
    expected = plain_differences(srv, baseline)
    diverging = {c: d["first_divergence"] for c, d in expected.items() if d["first_divergence"] is not None}
    ex = bit["ex"]
    assert bit["code"] == 10 and not ex["passed"], bit["out"]
    assert listed_divergences(ex) == diverging, "the check and plain requests disagree on where the ids differ"
    same = [c for c in expected if c not in diverging]
    assert same, "float16 changed the ids of every case"
    moved = {c for c in same if expected[c]["max_abs"] > 0}
    assert moved, "float16 gave bit-identical logprobs: nothing planted"
    by_case = {n["case"]: n for n in ex["non_identical"]}
    for c in moved:  # ids kept, logprobs moved: `equivalent`, a bit-exact failure on logprob values only
        assert by_case[c]["verdict"] == "equivalent" and not by_case[c]["passed"] and by_case[c]["max_ulp"] > 0
    moved_by = max(expected[c]["max_abs"] for c in same)
    assert moved_by <= 0.01
    # Two candidates can swap only where float16 moved their logprobs by more than their gap: at most
    # twice the largest move it made (0.002 nats here once; a fresh SGLang venv on another CPU moved
    # them further, and one case diverged at a gap of 0.0035)
    tie = max(0.002, 2 * moved_by)
    for n in ex["non_identical"]:
        if n["first_divergence"] is not None:
            assert n["verdict"] == "near-tie divergence" and n["baseline_top2_gap"] <= tie, (n, tie)
    token = check_candidate("f16", "token-exact", servers, baseline, profile_for, work)
    assert (token["code"] == 0) == (not diverging), token["out"]
    near = check_candidate("f16", "near-tie-tolerant", servers, baseline, profile_for, work, gap=tie)
    assert near["code"] == 0, near["out"]
    note(engine_logs, test="f16", first_divergences=diverging, same_ids=len(same), cases=len(expected),
         gaps={n["case"]: n["baseline_top2_gap"] for n in ex["non_identical"] if n["first_divergence"] is not None},
         max_abs_logprob=max(expected[c]["max_abs"] for c in same), max_ulp=max(expected[c]["max_ulp"] for c in same),
         verdicts_bit_exact=ex["verdicts"], token_exact_exit=token["code"], bit_exact_exit=bit["code"],
         near_tie_exit=near["code"])


@pytest.fixture(scope="module")
def fingerprint_f16(servers, profile_for, work) -> dict[str, Any]:
    srv = servers.get("f16")
    code, out = cli("fingerprint", str(profile_for("fp-f16", srv)), "--against", str(work / "fp-f32.json"))
    return {"code": code, "out": out}


def test_the_fingerprint_names_the_dtype_change(fingerprint_f32, fingerprint_f16):
    out = fingerprint_f16["out"]
    assert "engine.server_info.dtype: 'float32' -> 'float16'" in out, out
    assert "declared.dtype: 'float32' -> 'float16'" in out


# ------------------------------------------------------------------------------ bfloat16
@pytest.fixture(scope="module")
def bf16_check(servers, baseline, profile_for, work) -> dict[str, Any]:
    return check_candidate("bf16", "token-exact", servers, baseline, profile_for, work)


def test_bfloat16_fails_with_first_divergences_where_plain_requests_diverge(servers, baseline, bf16_check, engine_logs):
    ex = bf16_check["ex"]
    assert bf16_check["code"] == 10 and not ex["passed"], bf16_check["out"]
    expected = plain_differences(servers.get("bf16"), baseline)
    diverging = {c: d["first_divergence"] for c, d in expected.items() if d["first_divergence"] is not None}
    assert diverging, "bfloat16 gave the float32 ids on every case: the planted divergence is gone"
    assert listed_divergences(ex) == diverging
    cases = baseline["doc"]["cases"]
    for n in ex["non_identical"]:
        if n["first_divergence"] is not None:
            assert n["baseline_token"] == cases[n["case"]]["output_ids"][n["first_divergence"]] and not n["passed"]
            assert f"{n['baseline_token']} → {n['candidate_token']}" in bf16_check["out"]
    bundles = sorted((bf16_check["dir"] / "divergences").glob("*.json"))
    assert len(bundles) == len(ex["non_identical"])
    note(engine_logs, test="bf16", first_divergences=diverging, verdicts=ex["verdicts"],
         gaps={n["case"]: n["baseline_top2_gap"] for n in ex["non_identical"] if n["first_divergence"] is not None},
         same_ids_max_abs=max([d["max_abs"] for c, d in expected.items() if c not in diverging] or [0.0]))


def test_replay_of_a_bfloat16_bundle_reproduces_the_divergence(servers, bf16_check, capsys):
    docs = [load_json(b) | {"path": b} for b in sorted((bf16_check["dir"] / "divergences").glob("*.json"))]
    doc = next(b for b in docs if b["comparison"]["first_divergence"] is not None)
    srv = servers.get("bf16")
    capsys.readouterr()
    assert main(["replay", str(doc["path"]), "--endpoint", srv.url, "--times", "2"]) == 10
    assert capsys.readouterr().out.count(f"diverges at token {doc['comparison']['first_divergence']} ") == 2


# ------------------------------------------------------------------ float32, second start
def test_two_starts_of_one_configuration_differ_only_in_volatile_fields_and_fingerprint_alike(
        servers, fingerprint_f32, profile_for, work, engine_logs):
    """The raw /server_info of the first and a second float32 start differ (ports, start-up times,
    live state); every differing field lies under a key of VOLATILE_KEYS, so loadgate's fingerprint
    of the second start is identical to the first's."""
    srv = servers.get("f32", fresh=True)
    firsts = [s for s in servers.starts if s["variant"] == "f32"]
    assert len(firsts) >= 2
    a, b = firsts[0]["server_info"], firsts[-1]["server_info"]
    differing = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
    assert differing, "two starts gave identical /server_info documents (ports at least should differ)"
    assert set(differing) <= VOLATILE_KEYS, set(differing) - VOLATILE_KEYS
    inner = a["internal_states"][0], b["internal_states"][0]
    inner_diff = sorted(k for k in inner[0].keys() | inner[1].keys() if inner[0].get(k) != inner[1].get(k))
    assert set(inner_diff) <= VOLATILE_KEYS, set(inner_diff) - VOLATILE_KEYS
    code, out = cli("fingerprint", str(profile_for("fp-f32-again", srv)), "--against", str(work / "fp-f32.json"))
    assert code == 0 and "identical fingerprints" in out, out
    note(engine_logs, test="fingerprint-restart", differing_top_level=differing, differing_internal_states=inner_diff,
         ready_s=[s["ready_s"] for s in servers.starts])


# ---------------------------------------------------------- what cannot run on this CPU
SPECULATIVE = {
    "NGRAM": (["--speculative-num-draft-tokens", "4"], "No module named 'sgl_kernel.speculative'"),
    "STANDALONE": (["--speculative-draft-model-path", "{draft}", "--speculative-num-steps", "3",
                    "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"], None),
}


@pytest.mark.parametrize("algorithm", sorted(SPECULATIVE))
def test_speculative_decoding_cannot_start_here_and_the_shim_log_shows_why(
        algorithm, servers, models, engine_logs, tmp_path):
    """SGLang's CPU speculative path needs kernels that only build from SGLang's repository: NGRAM
    fails at import (`sgl_kernel.speculative` does not exist in the shim), STANDALONE with the draft
    model calls a shim function while starting, which its log (this test's own, not the session's)
    records. So no speculative statistics are recorded from a real SGLang here."""
    servers.close()  # one SGLang server at a time
    flags, message = SPECULATIVE[algorithm]
    variant = sglang_engine.VARIANTS["f32"]
    port = common.free_port()
    argv = sglang_engine.argv_for(variant, str(models["target"]), port)
    argv += ["--speculative-algorithm", algorithm] + [f.format(draft=models["draft"]) for f in flags]
    log = tmp_path / "shim-calls.log"
    srv = common.Server(argv, port=port, log_path=engine_logs / f"sglang-{algorithm}-{port}.log",
                        env=sglang_engine.server_env(log), ready_timeout_s=240, cwd=engine_logs)
    with pytest.raises(common.EngineStartError) as err:
        srv.start()
    calls = [ln.split("\t")[0] for ln in shim_calls(log)]
    if message is not None:
        assert message in srv.log_path.read_text(errors="replace")
    else:
        assert "copy_all_layer_kv_cache_cpu" in calls, (calls, str(err.value)[-800:])
    note(engine_logs, test="speculative", algorithm=algorithm, shim_calls=calls,
         error=message or "shim function called at start")


def test_no_shim_function_was_called_by_any_server(servers, sgl_kernel_shim_log):
    servers.close()  # the last server's exit too
    assert shim_calls(sgl_kernel_shim_log) == []
    assert servers.starts and all(math.isfinite(s["ready_s"]) for s in servers.starts)
