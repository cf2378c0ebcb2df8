"""Dataset readers (`loadgate.load.workload.dataset`): each format gives the same rows as the bundled
set's JSONL, every bad row is one line naming the file, the row and the fields present, and rows are
drawn with the seed without replacement while they last. Files are written here, from
workloads/prompts.jsonl (our own text)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from loadgate.config.profile import Dataset, DatasetFields, Distribution, Profile, Target, Workload
from loadgate.errors import UsageError
from loadgate.load.plan import build_plan
from loadgate.load.workload.dataset import Row, Rows, detect_format, prepare, to_row

BUNDLED = Path(__file__).resolve().parents[2] / "workloads" / "prompts.jsonl"
ROWS = [orjson.loads(line) for line in BUNDLED.read_bytes().splitlines() if line.strip()]


def as_sharegpt(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The bundled rows in ShareGPT's layout (system, human, gpt turns; our extra keys kept)."""
    who = {"system": "system", "user": "human", "assistant": "gpt"}
    return [{"id": r["id"], "category": r["category"],
             "conversations": [{"from": who[m["role"]], "value": m["content"]} for m in r["messages"]]
             + [{"from": "gpt", "value": r["completion"]}]} for r in rows]


def write_sharegpt(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_bytes(orjson.dumps(as_sharegpt(rows)))
    return path


def table(rows: list[dict[str, Any]]) -> Any:
    import pyarrow as pa

    return pa.table({"id": [r["id"] for r in rows], "category": [r["category"] for r in rows],
                     "messages": [r["messages"] for r in rows], "completion": [r["completion"] for r in rows]})


def write_parquet(path: Path, rows: list[dict[str, Any]]) -> Path:
    import pyarrow.parquet as pq

    pq.write_table(table(rows), str(path), row_group_size=16)
    return path


def write_arrow_folder(folder: Path, rows: list[dict[str, Any]], files: int = 2) -> Path:
    """As `datasets.save_to_disk` lays it out: data-0000k-of-0000n.arrow IPC streams and state.json."""
    import pyarrow as pa

    folder.mkdir()
    t = table(rows)
    names = []
    per = -(-len(rows) // files)
    for k in range(files):
        name = f"data-{k:05d}-of-{files:05d}.arrow"
        with pa.OSFile(str(folder / name), "wb") as sink, pa.ipc.new_stream(sink, t.schema) as w:
            w.write_table(t.slice(k * per, per), max_chunksize=5)
        names.append(name)
    (folder / "state.json").write_text(json.dumps({"_data_files": [{"filename": n} for n in names],
                                                   "_fingerprint": "0", "_split": None}))
    (folder / "dataset_info.json").write_text("{}")
    return folder


def profile(path: Path, requests: int = 8, api: str = "openai-completions", **ds: Any) -> Profile:
    return Profile(name="ds", seed=3, target=Target(endpoint="embedded", api=api),
                   workload=Workload(requests=requests, tokenizer="none", dataset=Dataset(path=str(path), **ds),
                                     output_len=Distribution(dist="fixed", value=16)),
                   path=str(path.parent / "p.yaml"))


def rows_of(p: Profile) -> Rows:
    from loadgate.load.workload.dataset import open_rows

    r = open_rows(p)
    assert r is not None
    return r


def expected(r: dict[str, Any], fmt: str) -> Row:
    """The row as read: messages stay messages; ShareGPT's turns are a prompt (chat messages where a
    system turn comes first) and the reply to its first human turn."""
    msgs = r["messages"]
    if fmt != "sharegpt":
        return Row(None, tuple(msgs), r["completion"], r["category"])
    if msgs[0]["role"] == "system":
        return Row(None, tuple(msgs), r["completion"], r["category"])
    reply = msgs[1]["content"] if len(msgs) > 1 else r["completion"]
    return Row(msgs[0]["content"], None, reply, r["category"])


def test_the_bundled_set_has_eight_prompts_in_each_of_eight_categories():
    from collections import Counter

    assert Counter(r["category"] for r in ROWS) == {c: 8 for c in (
        "code", "summarisation", "translation", "question_answering", "maths_reasoning", "multi_turn_chat",
        "retrieval", "repetitive")}
    for r in ROWS:
        assert r["messages"][-1]["role"] == "user" and r["completion"]
        if r["category"] == "retrieval":  # long context with the answer span in it
            assert r["answer"] in r["messages"][-1]["content"] and len(r["messages"][-1]["content"]) > 3000
        if r["category"] == "multi_turn_chat":
            assert [m["role"] for m in r["messages"]][-3:] == ["user", "assistant", "user"]


def test_a_repetitive_prompt_holds_most_of_its_own_reply():
    """Prompt lookup can hit: most of a repetitive row's reply (its word 3-grams) is already in the
    prompt, in six rows of eight (the other two continue a pattern or rename throughout), and in no
    prose row outside retrieval (whose short answers quote the context) is more than a quarter."""
    import statistics

    def grams(text: str) -> set[tuple[str, ...]]:
        w = text.split()
        return {tuple(w[i:i + 3]) for i in range(len(w) - 2)}

    def overlap(r: dict[str, Any]) -> float:
        reply = grams(r["completion"])
        return len(reply & grams(" ".join(m["content"] for m in r["messages"]))) / max(1, len(reply))

    rep = [overlap(r) for r in ROWS if r["category"] == "repetitive"]
    prose = [overlap(r) for r in ROWS if r["category"] not in ("repetitive", "retrieval")]
    assert sum(x > 0.5 for x in rep) >= 6 and statistics.median(rep) > 0.75 and max(prose) < 0.25, (rep, prose)


@pytest.mark.parametrize("fmt", ["jsonl", "sharegpt", "parquet", "arrow"])
def test_every_format_reads_the_rows_the_jsonl_holds(tmp_path, fmt):
    path = {"jsonl": lambda: BUNDLED, "sharegpt": lambda: write_sharegpt(tmp_path / "sg.json", ROWS),
            "parquet": lambda: write_parquet(tmp_path / "d.parquet", ROWS),
            "arrow": lambda: write_arrow_folder(tmp_path / "arrow", ROWS)}[fmt]()
    rows = rows_of(profile(path, api="openai-chat"))  # chat: messages rows need no template
    assert rows.format == fmt and len(rows) == len(ROWS)
    want = [expected(r, fmt) for r in ROWS]
    got = rows.fetch(range(len(ROWS)))
    assert [got[k] for k in range(len(ROWS))] == want
    some = rows.fetch([40, 3, 17])  # drawn rows, fetched again in one pass
    assert some == {k: want[k] for k in (3, 17, 40)}


def test_a_single_arrow_stream_file_and_the_file_format_read_too(tmp_path):
    import pyarrow as pa

    t = table(ROWS[:5])
    with pa.OSFile(str(tmp_path / "one.arrow"), "wb") as sink, pa.ipc.new_file(sink, t.schema) as w:
        w.write_table(t)
    rows = rows_of(profile(tmp_path / "one.arrow", api="openai-chat"))
    assert list(rows.fetch(range(5)).values()) == [expected(r, "arrow") for r in ROWS[:5]]


def test_the_format_is_told_by_the_name_and_a_jsonl_trace_by_its_first_line(tmp_path):
    ds = Dataset(path="x")
    (tmp_path / "t.jsonl").write_text('{"input_len": 5, "output_len": 3}\n')
    (tmp_path / "p.jsonl").write_text('{"prompt": "hi", "output_len": 3}\n')
    (tmp_path / "c.jsonl").write_text('{"prompt": "hi", "completion": "there"}\n')
    assert detect_format(ds, tmp_path / "t.jsonl") == "trace"
    assert detect_format(ds, tmp_path / "p.jsonl") == "trace"  # it states its output length
    assert detect_format(ds, tmp_path / "c.jsonl") == "jsonl"
    assert detect_format(ds, tmp_path / "a.json") == "sharegpt"
    with pytest.raises(UsageError, match=r"a\.csv: cannot tell the dataset's format .* set workload\.dataset\.format"):
        detect_format(ds, tmp_path / "a.csv")
    (tmp_path / "empty").mkdir()
    with pytest.raises(UsageError, match="a folder without state.json"):
        detect_format(ds, tmp_path / "empty")


def test_a_sharegpt_row_keeps_its_system_turn_and_takes_the_first_reply():
    obj = {"conversations": [{"from": "system", "value": "Be brief."}, {"from": "human", "value": "Hi?"},
                             {"from": "gpt", "value": "Hello."}, {"from": "human", "value": "More"},
                             {"from": "gpt", "value": "No."}]}
    assert to_row(obj, DatasetFields(), "f: row 1") == Row(
        None, ({"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi?"}), "Hello.", None)
    assert to_row({"conversations": obj["conversations"][1:3], "category": 7}, DatasetFields(), "w") == \
        Row("Hi?", None, "Hello.", "7")


def test_mapped_fields_are_the_only_ones_looked_for():
    f = DatasetFields(prompt="question", completion="answer", category="topic")
    assert to_row({"question": "Q", "answer": "A", "topic": "t", "prompt": "no"}, f, "w") == Row("Q", None, "A", "t")
    with pytest.raises(UsageError) as e:
        to_row({"prompt": "P", "answer": "A"}, f, "data.jsonl: line 4")
    assert str(e.value.message) == ("data.jsonl: line 4: needs one of question (fields present: prompt, answer); "
                                    "map yours with workload.dataset.fields")


BAD_ROWS = [
    ('{"prompt": "a"}\n{"prompt": "b"\n', "bad.jsonl: line 2: not a JSON object"),
    ('{"prompt": "a"}\n\n{"title": "x", "body": "y"}\n',
     "bad.jsonl: line 3: needs one of conversations, messages, prompt, text, instruction (fields present: title, body)"),
    ('[1, 2]\n', "bad.jsonl: line 1: expected an object (a JSON object, a table row), got list"),
    ('{"messages": [{"role": "user"}]}\n', "bad.jsonl: line 1: messages: expected a list of {role, content} messages"),
    ('{"messages": [{"role": "assistant", "content": "x"}]}\n',
     "bad.jsonl: line 1: messages: no message before the assistant's reply"),
    ('{"conversations": [{"from": "gpt", "value": "x"}]}\n',
     "bad.jsonl: line 1: conversations: no human turn with text (the prompt)"),
]


@pytest.mark.parametrize("text,message", BAD_ROWS)
def test_a_bad_row_is_one_line_naming_the_file_the_line_and_the_fields(tmp_path, text, message):
    (tmp_path / "bad.jsonl").write_text(text)
    with pytest.raises(UsageError) as e:
        rows_of(profile(tmp_path / "bad.jsonl", api="openai-chat"))
    assert message in e.value.message and "\n" not in e.value.message and str(tmp_path) in e.value.message


def test_a_parquet_file_without_the_mapped_column_names_its_columns(tmp_path):
    path = write_parquet(tmp_path / "d.parquet", ROWS[:4])
    with pytest.raises(UsageError) as e:
        rows_of(profile(path, api="openai-chat", fields=DatasetFields(prompt="question")))
    assert e.value.message == (f"{path}: workload.dataset.fields.prompt: no column 'question' "
                               "(columns: id, category, messages, completion)")
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"title": ["a"], "n": [1]}), str(tmp_path / "none.parquet"))
    with pytest.raises(UsageError, match=r"none\.parquet: needs a column of one of conversations, messages, prompt, "
                                         r"text, instruction \(columns: title, n\)"):
        rows_of(profile(tmp_path / "none.parquet"))


def test_a_sharegpt_file_that_is_not_an_array_or_a_row_that_is_bad_is_one_line(tmp_path):
    (tmp_path / "o.json").write_text('{"conversations": []}')
    with pytest.raises(UsageError, match=r"o\.json: expected a JSON array of objects \(ShareGPT\), got dict"):
        rows_of(profile(tmp_path / "o.json"))
    rows = as_sharegpt(ROWS[:3])
    rows[2] = {"id": "x", "turns": []}
    (tmp_path / "s.json").write_text(json.dumps(rows))
    with pytest.raises(UsageError) as e:
        rows_of(profile(tmp_path / "s.json", api="openai-chat"))
    assert e.value.message.endswith("s.json: row 3: needs one of conversations, messages, prompt, text, instruction "
                                    "(fields present: id, turns); map yours with workload.dataset.fields")


def test_chat_rows_to_a_completions_api_without_a_tokenizer_are_refused_at_their_row(tmp_path):
    with pytest.raises(UsageError) as e:
        rows_of(profile(BUNDLED))  # tokenizer none, completions: the first messages row is row 1
    assert e.value.message.startswith(f"{BUNDLED}: line 1: chat messages go to a completions API")


def test_without_pyarrow_a_parquet_dataset_names_the_extra(tmp_path, monkeypatch):
    path = write_parquet(tmp_path / "d.parquet", ROWS[:2])
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # import pyarrow fails
    with pytest.raises(UsageError) as e:
        rows_of(profile(path))
    assert e.value.message == (f"{path}: reading parquet and Arrow files needs pyarrow, the extra 'datasets': "
                               "pip install 'loadgate[datasets]'")


def _drawn(p: Profile) -> list[int]:
    prepared = asyncio.run(prepare(p, rows_of(p), None))
    return [r.row for r in prepared.requests]


def test_rows_are_drawn_with_the_seed_without_replacement_while_they_last(tmp_path):
    p = profile(BUNDLED, requests=150, api="openai-chat")
    drawn = _drawn(p)
    assert sorted(drawn[:64]) == list(range(64)) and drawn[64:128] == drawn[:64] and drawn[128:] == drawn[:22]
    assert drawn[:64] != list(range(64)) and _drawn(p) == drawn
    assert _drawn(dataclasses.replace(p, seed=4)) != drawn
    file_order = dataclasses.replace(p, workload=dataclasses.replace(
        p.workload, dataset=Dataset(path=str(BUNDLED), order="file")))
    assert _drawn(file_order) == [k % 64 for k in range(150)]


def test_without_a_tokenizer_prompts_go_as_written_with_the_profiles_output_lengths(tmp_path):
    p = profile(write_parquet(tmp_path / "d.parquet", ROWS), requests=64, api="openai-chat")
    prepared = asyncio.run(prepare(p, rows_of(p), None))
    plan = build_plan(p, [1, 2, 3], dataset=prepared)
    for req in plan:
        row = ROWS[prepared.requests[req.i].row]
        assert req.messages == tuple(row["messages"]) and req.prompt_ids is None and req.prompt_len is None
        assert req.output_len == 16 and req.category == row["category"]
    assert prepared.meta["output_lengths"] == "workload.output_len" and prepared.meta["distinct_rows"] == 64
    assert prepared.meta["prompt_counts"] == "none (the server's usage)"


def test_reading_a_100k_row_parquet_file_of_200_mb_raises_rss_by_at_most_100_mb(tmp_path):
    """benchmarks/dataset_memory.py's parquet case: 100,000 rows of incompressible text, uncompressed
    (≥ 200 MB on disk), every row checked and 100 drawn in a fresh process, whose resident set is
    sampled every 2 ms (here: +43 to +48 MiB)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("dataset_memory", BUNDLED.parents[1] / "benchmarks" / "dataset_memory.py")
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    path = bench.write_parquet(tmp_path / "big.parquet", 100_000, 2100)
    assert path.stat().st_size >= 200 * 10**6
    rows, drawn, grew = bench.measure(path, 100)
    assert (rows, drawn) == (100_000, 100)
    assert grew <= 100 * 10**6, f"peak RSS grew {grew / 2**20:.1f} MiB"


def test_a_jsonl_file_whose_first_line_states_lengths_is_a_trace_and_keeps_its_categories(tmp_path):
    from loadgate.load.plan import check_source

    (tmp_path / "t.jsonl").write_text(
        '{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "category": "chat"}\n'
        '{"prompt": "a b c", "output_len": 3}\n')
    p = profile(tmp_path / "t.jsonl", api="openai-chat")
    assert detect_format(p.workload.source, tmp_path / "t.jsonl") == "trace"  # type: ignore[arg-type]
    check_source(p)
    plan = build_plan(dataclasses.replace(p, workload=dataclasses.replace(p.workload, requests=2)), [1, 2, 3])
    assert [r.category for r in plan] == ["chat", None] and [r.output_len for r in plan] == [4, 3]
    filtered = dataclasses.replace(p, workload=dataclasses.replace(
        p.workload, tokenizer="server", dataset=Dataset(path=str(tmp_path / "t.jsonl"), max_input_len=9)))
    with pytest.raises(UsageError, match=r"t\.jsonl: its first line states lengths \(or ids\), so it is read as a trace"):
        check_source(filtered)
    (tmp_path / "b.jsonl").write_text('{"prompt": "x", "output_len": 3, "category": ["a"]}\n')
    with pytest.raises(UsageError, match=r"b\.jsonl:1: category: a category is a name \(text\), got list"):
        check_source(profile(tmp_path / "b.jsonl"))


@pytest.mark.parametrize("obj,message", [
    ({"prompt": "x", "category": ["a", "b"]}, "w: category: a category is a name (text), got list"),
    ({"prompt": 12}, "w: prompt: expected the prompt's text, got int"),
])
def test_a_category_or_prompt_of_the_wrong_type_is_one_line(obj, message):
    with pytest.raises(UsageError) as e:
        to_row(obj, DatasetFields(), "w")
    assert e.value.message == message
    assert to_row({"prompt": "x", "category": 3}, DatasetFields(), "w").category == "3"
    assert to_row({"prompt": "x", "category": ""}, DatasetFields(), "w").category is None


def test_arrow_files_with_other_columns_or_a_cut_stream_are_one_line(tmp_path):
    import pyarrow as pa

    folder = write_arrow_folder(tmp_path / "a", ROWS[:8])
    other = pa.table({"prompt": ["x"]})
    with pa.OSFile(str(folder / "data-00001-of-00002.arrow"), "wb") as sink, pa.ipc.new_stream(sink, other.schema) as w:
        w.write_table(other)
    with pytest.raises(UsageError, match=r"data-00001-of-00002\.arrow: its columns \(prompt\) are not those of "
                                         r"data-00000-of-00002\.arrow"):
        rows_of(profile(folder, api="openai-chat"))
    cut = write_arrow_folder(tmp_path / "c", ROWS[:8])
    f = cut / "data-00000-of-00002.arrow"
    f.write_bytes(f.read_bytes()[:-700])
    with pytest.raises(UsageError, match=r"data-00000-of-00002\.arrow: (cannot read|not an Arrow IPC file)"):
        rows_of(profile(cut, api="openai-chat"))


def test_length_filters_are_refused_with_lengths_shaped_to_the_profile(tmp_path):
    p = tmp_path / "p.yaml"
    p.write_text("workload:\n  dataset: {path: d.jsonl, lengths: profile, max_input_len: 256}\n")
    from loadgate.config.profile import load_profile
    from loadgate.errors import ProfileError

    with pytest.raises(ProfileError, match=r"workload\.dataset\.max_input_len: length filters judge a row's own "
                                           r"lengths: not with lengths: profile"):
        load_profile(p)


def test_a_server_whose_tokenize_renders_no_chat_says_to_use_a_local_tokenizer():
    """llama-server answers /tokenize with messages as {"tokens": []}: no count of 0, a one-line error."""
    from aiohttp import ClientSession, web

    from loadgate.errors import EngineError
    from loadgate.load.workload.dataset import ServerCounter
    from tests.loopback import json_routes

    async def tokenize(request: web.Request) -> web.Response:
        return web.json_response({"tokens": []})

    async def go() -> str:
        async with json_routes({"/tokenize": tokenize}) as base, ClientSession() as s:
            with pytest.raises(EngineError) as e:
                await ServerCounter(s, base, "m", "openai-chat").chat_ids([{"role": "user", "content": "hi"}])
            return e.value.message

    msg = asyncio.run(go())
    assert msg == ("/tokenize of chat messages answered no token ids; this server's /tokenize does not render chat "
                   "messages: give workload.tokenizer a local tokenizer with the model's chat template")


def test_shaping_a_chat_drops_whole_exchanges_so_the_turns_still_alternate(tmp_path):
    """A multi-turn row cut to fewer tokens than its earlier turns: the oldest user turn goes with
    the assistant's answer to it, the last user turn is cut to fit (the simulator's tokenizer,
    exported as a Hugging Face one)."""
    from loadgate.load.workload.dataset import LocalCounter, _make
    from loadgate.load.workload.hf import HFTokenizer
    from loadgate.sim.hf_export import write_hf_tokenizer

    tok = LocalCounter(HFTokenizer.load(write_hf_tokenizer(4096, tmp_path / "tok")))
    row = next(expected(r, "jsonl") for r in ROWS if r["category"] == "multi_turn_chat")
    msgs = list(row.messages or ())
    assert [m["role"] for m in msgs] == ["user", "assistant", "user"]

    def overhead(ms: list[dict[str, Any]]) -> int:  # the template and the turns before the last
        return len(asyncio.run(tok.chat_ids(ms))) - len(asyncio.run(tok.text_ids(ms[-1]["content"], False)))

    o3, o2 = overhead(msgs), overhead(msgs[1:])
    assert o2 + 10 < o3
    want = (o2 + o3) // 2  # more than [assistant, last user] needs, less than the whole conversation
    req = asyncio.run(_make(row, 0, tok, True, want, 16))
    assert req.messages is not None and [m["role"] for m in req.messages] == ["user"]
    assert req.counted_len == len(asyncio.run(tok.chat_ids(list(req.messages)))) and abs(req.counted_len - want) <= 3


def test_a_prompt_a_local_tokenizer_gives_no_tokens_is_one_line_not_a_shaping_assertion(tmp_path):
    from loadgate.load.workload.dataset import LocalCounter
    from loadgate.load.workload.hf import HFTokenizer
    from loadgate.sim.hf_export import write_hf_tokenizer

    tok = LocalCounter(HFTokenizer.load(write_hf_tokenizer(4096, tmp_path / "tok")))
    with pytest.raises(UsageError, match=r"tok: a dataset prompt has no tokens: ''"):
        asyncio.run(tok.text_ids("", True))
    assert asyncio.run(tok.text_ids("", False)) == []  # a reply of no tokens: the profile's output length
