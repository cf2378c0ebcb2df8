"""Runs from datasets against one simulator child process (its ground-truth log says what it was
sent): the bundled set and the same rows as ShareGPT, parquet and an Arrow folder; a chat API; a
local tokenizer; lengths shaped to the profile; filters; and the bad-input lines at the command line."""

from __future__ import annotations

import dataclasses
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

import loadgate
from loadgate.analysis.summary import SUMMARY_VERSION
from loadgate.cli import main
from loadgate.config.profile import Dataset, Distribution, Load, Output, Profile, Target, Workload
from loadgate.config.simconfig import SimConfig
from loadgate.jsonutil import load_json
from loadgate.records import read_records
from loadgate.sim.chat import chat_prompt_ids
from loadgate.sim.hf_export import write_hf_tokenizer
from loadgate.sim.process import SimProcess
from loadgate.sim.tokenizer import Tokenizer
from tests.load.test_dataset import BUNDLED, ROWS, expected, write_arrow_folder, write_parquet, write_sharegpt
from tests.profiles import LAX_BUDGETS, LAX_HEALTH

VOCAB = 4096


@pytest.fixture(scope="module")
def sim() -> Any:
    with SimProcess(SimConfig(vocab_size=VOCAB, decode_step_us=150.0, prefill_us_per_token=0.5),
                    startup_timeout=60) as s:
        yield s


def ds_profile(url: str, tmp: Path, path: Path, *, api: str = "openai-completions", requests: int = 64,
               tokenizer: str = "server", **ds: Any) -> Profile:
    return Profile(name="ds", seed=11, target=Target(endpoint=url, api=api),
                   workload=Workload(requests=requests, tokenizer=tokenizer, dataset=Dataset(path=str(path), **ds),
                                     input_len=Distribution(dist="fixed", value=100),
                                     output_len=Distribution(dist="fixed", value=20)),
                   load=Load(concurrency=8), health=LAX_BUDGETS, output=Output(dir=str(tmp / "out")),
                   path=str(tmp / "p.yaml"))


def run(sim: Any, p: Profile) -> tuple[list[Any], list[dict[str, Any]], dict[str, Any]]:
    """(measured records, the simulator's truth for them, meta.json)."""
    sim.reset_truth()
    result = loadgate.run(p, unverified=True)
    assert result.exit_code == 11, result  # unverified: figures marked, nothing judged against a baseline
    recs = list(read_records(result.run_dir / "records.jsonl"))
    return recs, sim.truth_records(), load_json(result.run_dir / "meta.json")


def counts(row: Any, chat_api: bool) -> tuple[int, int]:
    """The simulator's own tokenizer's (prompt, reply) counts of a row as sent: a completions API
    gets the prompt's ids (a chat row's rendered template), a chat API the messages."""
    tok = Tokenizer(VOCAB)
    msgs = list(row.messages) if row.messages is not None else [{"role": "user", "content": row.prompt}]
    n_in = len(chat_prompt_ids(tok, msgs)) if chat_api or row.messages is not None else len(tok.encode(row.prompt))
    return n_in, len(tok.encode(row.completion))


@pytest.mark.parametrize("fmt", ["jsonl", "sharegpt", "parquet", "arrow"])
def test_a_run_from_each_format_sends_every_row_once_at_its_own_lengths(sim, tmp_path, fmt):
    rows = ROWS if fmt == "jsonl" else ROWS[::4]  # the bundled file whole; two rows of each category else
    path = {"jsonl": lambda: BUNDLED, "sharegpt": lambda: write_sharegpt(tmp_path / "sg.json", rows),
            "parquet": lambda: write_parquet(tmp_path / "d.parquet", rows),
            "arrow": lambda: write_arrow_folder(tmp_path / "arrow", rows)}[fmt]()
    recs, truth, meta = run(sim, ds_profile(sim.url, tmp_path, path, requests=len(rows)))
    want = [(r["category"], *counts(expected(r, fmt), False)) for r in rows]
    # the server saw each row's prompt and wrote its reply's length (ignore_eos), each row once
    assert Counter((t["prompt_tokens"], t["completion_tokens"]) for t in truth) == Counter(w[1:] for w in want)
    assert Counter((r.category, r.prompt_tokens_planned, r.output_tokens_planned) for r in recs) == Counter(want)
    assert all(r.succeeded and r.prompt_tokens == r.prompt_tokens_planned for r in recs)
    d = meta["dataset"]
    assert (d["format"], d["rows"], d["distinct_rows"], d["lengths"]) == (fmt, len(rows), len(rows), "dataset")
    assert d["categories"] == sorted({r["category"] for r in ROWS})


def test_a_chat_api_gets_the_messages_planned_at_the_templates_count(sim, tmp_path):
    recs, truth, _ = run(sim, ds_profile(sim.url, tmp_path, BUNDLED, api="openai-chat", requests=16))
    assert all(t["route"] == "/v1/chat/completions" for t in truth) and len(truth) == 16
    drawn = Counter((r.prompt_tokens_planned, r.output_tokens_planned) for r in recs)
    assert drawn <= Counter(counts(expected(r, "jsonl"), True) for r in ROWS)  # 16 distinct rows of 64
    assert sum(drawn.values()) == 16 and all(r.prompt_tokens == r.prompt_tokens_planned for r in recs)


def test_a_local_tokenizer_counts_as_the_server_does(sim, tmp_path):
    folder = write_hf_tokenizer(VOCAB, tmp_path / "tok")
    recs, truth, meta = run(sim, ds_profile(sim.url, tmp_path, BUNDLED, tokenizer=str(folder), requests=16))
    assert all(r.prompt_tokens == r.prompt_tokens_planned and r.completion_tokens == r.output_tokens_planned
               for r in recs) and len(recs) == 16
    assert Counter((r.prompt_tokens_planned, r.output_tokens_planned) for r in recs) <= \
        Counter(counts(expected(r, "jsonl"), False) for r in ROWS)
    assert meta["dataset"]["prompt_counts"] == "the tokenizer source"


def test_lengths_shaped_to_the_profile_cut_or_repeat_each_rows_own_tokens(sim, tmp_path):
    recs, truth, meta = run(sim, ds_profile(sim.url, tmp_path, BUNDLED, lengths="profile", requests=32))
    assert [t["prompt_tokens"] for t in truth] == [100] * 32 and [t["completion_tokens"] for t in truth] == [20] * 32
    assert all(r.prompt_tokens_planned == 100 and r.output_tokens_planned == 20 for r in recs)
    assert meta["dataset"]["output_lengths"] == "workload.output_len"
    recs, truth, _ = run(sim, ds_profile(sim.url, tmp_path, BUNDLED, api="openai-chat", lengths="profile",
                                         requests=16))
    # chat: the last message's own tokens are shaped, then the whole prompt counted again
    assert all(abs(r.prompt_tokens_planned - 100) <= 3 and r.prompt_tokens == r.prompt_tokens_planned for r in recs), [(r.prompt_tokens_planned, r.prompt_tokens) for r in recs]


def test_length_filters_keep_the_rows_within_them_and_a_sweep_repeats_them(sim, tmp_path):
    want = sorted(counts(expected(r, "jsonl"), False)[0] for r in ROWS)
    lo = want[40]  # 24 rows have at least this many prompt tokens
    recs, _, meta = run(sim, ds_profile(sim.url, tmp_path, BUNDLED, min_input_len=lo, requests=30))
    assert all(r.prompt_tokens_planned >= lo for r in recs)
    assert meta["dataset"]["distinct_rows"] == sum(1 for n in want if n >= lo) == 24
    assert meta["dataset"]["skipped_by_filters"] == 40


def write_yaml(tmp: Path, doc: dict[str, Any]) -> Path:
    p = tmp / "p.yaml"
    p.write_text(yaml.safe_dump(doc))
    return p


def test_a_dataset_that_filters_to_nothing_is_one_line_before_any_request(sim, tmp_path, capsys):
    sim.reset_truth()
    p = write_yaml(tmp_path, {"name": "f", "target": {"endpoint": sim.url},
                              "workload": {"dataset": {"path": str(BUNDLED), "min_input_len": 100000}},
                              "output": {"dir": str(tmp_path / "out")}})
    assert main(["run", "-q", "--unverified", str(p)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"loadgate: {BUNDLED}: no row of 64 passes the length filters (min_input_len 100000)"
    assert not [t for t in sim.truth_records() if t["route"] != "/tokenize"]


def test_a_bad_row_stops_validate_and_run_with_one_line(sim, tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "fine"}\n{"title": "x"}\n')
    p = write_yaml(tmp_path, {"name": "b", "target": {"endpoint": sim.url},
                              "workload": {"dataset": {"path": "bad.jsonl"}}, "output": {"dir": str(tmp_path / "o")}})
    line = f"loadgate: {bad}: line 2: needs one of conversations, messages, prompt, text, instruction (fields " \
           "present: title); map yours with workload.dataset.fields"
    assert main(["validate", str(p)]) == 2
    assert capsys.readouterr().err.strip() == line
    sim.reset_truth()
    assert main(["run", "-q", "--unverified", str(p)]) == 2
    assert capsys.readouterr().err.strip() == line and sim.truth_records() == []
    assert not (tmp_path / "o").exists()


def test_the_trace_key_is_a_dataset_of_format_trace(sim, tmp_path):
    (tmp_path / "t.jsonl").write_text('{"input_len": 12, "output_len": 5}\n{"prompt": "hello there", "output_len": 3}\n')
    p = ds_profile(sim.url, tmp_path, tmp_path / "t.jsonl", requests=4)
    both = [p, dataclasses.replace(p, workload=dataclasses.replace(p.workload, dataset=None, trace="t.jsonl"))]
    got = []
    for q in both:
        recs, truth, _ = run(sim, q)
        got.append(sorted((t["prompt_tokens"], t["completion_tokens"]) for t in truth))
    n = len(Tokenizer(VOCAB).encode("hello there"))
    assert got[0] == got[1] == sorted([(12, 5), (12, 5), (n, 3), (n, 3)])  # the lines again, in order


def test_the_bundled_profile_passes_the_gate_with_figures_that_are_each_categorys_own(tmp_path, capsys):
    """profiles/categories.yaml as a user runs it (the results folder moved, a faster simulated
    decode): the exactness check passes (exit 0); the summary's figures by category are those of
    the category's own records, their acceptance sums to the level's counter deltas, and the
    console, HTML and compare show them."""
    import numpy as np

    doc = yaml.safe_load((Path(__file__).resolve().parents[2] / "profiles" / "categories.yaml").read_text())
    doc["workload"]["dataset"]["path"] = str(BUNDLED)
    doc["target"]["sim"]["decode_step_us"] = 300
    doc["output"] = {"dir": str(tmp_path / "out"), "run_id": "r"}
    doc["health"] = LAX_HEALTH
    assert main(["run", "-q", "--html", str(write_yaml(tmp_path, doc))]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    run_dir = tmp_path / "out" / "r"
    recs = list(read_records(run_dir / "records.jsonl"))
    summary = load_json(run_dir / "summary.json")
    assert summary["summary_version"] == SUMMARY_VERSION and summary["dataset"]["distinct_rows"] == 64
    g = summary["levels"]["8"]["groups"]["category"]
    assert sorted(g["by"]) == sorted({r["category"] for r in ROWS}) and all(v["requests"] == 8 for v in g["by"].values())
    for cat, f in g["by"].items():
        mine = [r for r in recs if r.category == cat]
        ttft = [(r.start_ns + r.chunk_ns[0] - r.origin_ns) / 1e6 for r in mine]
        assert f["requests"] == len(mine) and f["metrics"]["ttft"]["p50"] == pytest.approx(np.percentile(ttft, 50))
        steps = sum(r.spec.verify_steps for r in mine if r.spec)
        accepted = sum(r.spec.accepted for r in mine if r.spec)
        assert f["acceptance"]["per_request"]["acceptance_length"] == pytest.approx(1 + accepted / steps)
    au = g["acceptance_adds_up"]
    assert au["agree"] and au["values"]["accepted"][0] == sum(r.spec.accepted for r in recs if r.spec)
    assert "by category:" in out and "the category figures add up to the level's /metrics counters" in out
    assert all(any(line.startswith(cat + " ") for line in out.splitlines()) for cat in g["by"])
    assert "<h4>By category</h4>" in (run_dir / "report.html").read_text()
    assert main(["compare", str(run_dir), str(run_dir)]) == 0
    titles = [line for line in capsys.readouterr().out.splitlines() if line.startswith("r vs r at level")]
    assert titles[0].startswith("r vs r at level 8 (") and len(titles) == 1 + len(g["by"])


def test_a_sweep_over_a_dataset_sends_the_same_prompts_at_every_level_and_says_so(sim, tmp_path, capsys):
    p = dataclasses.replace(ds_profile(sim.url, tmp_path, BUNDLED, requests=8), load=Load(concurrency=(2, 4)))
    result = loadgate.run(p, unverified=True)
    recs = list(read_records(result.run_dir / "records.jsonl"))
    by_level = {lv: sorted(r.prompt_tokens_planned for r in recs if r.level == lv) for lv in (2, 4)}
    assert by_level[2] == by_level[4] and len(by_level[2]) == 8
    assert main(["report", str(result.run_dir)]) == 11
    assert "every level sends these same prompts, so a level after the first may meet them in the engine's " \
           "prefix cache" in capsys.readouterr().out
