"""Every profile in docs/workloads.md passes `loadgate validate`, with the files it names written
beside it (from the bundled prompt set, in each format); the README links the page."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from loadgate.cli import main
from tests.load.test_dataset import BUNDLED, ROWS, table, write_sharegpt

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "workloads.md"
SNIPPETS = re.findall(r"```yaml\n(.*?)```", DOC.read_text(), flags=re.S)


def write_files(folder: Path) -> Path:
    """The files the snippets name: `data/...` beside the profile, `../workloads/prompts.jsonl` above it."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    (folder.parent / "workloads").mkdir(parents=True)
    shutil.copy(BUNDLED, folder.parent / "workloads" / "prompts.jsonl")
    data = folder / "data"
    data.mkdir(parents=True)
    write_sharegpt(data / "sharegpt.json", ROWS)
    pq.write_table(pa.table({"question": [r["messages"][-1]["content"] for r in ROWS],
                             "answer": [r["completion"] for r in ROWS], "topic": [r["category"] for r in ROWS]}),
                   str(data / "train.parquet"))
    t = table(ROWS).rename_columns(["id", "source", "chat", "completion"])
    saved = data / "saved"
    saved.mkdir()
    with pa.OSFile(str(saved / "data-00000-of-00001.arrow"), "wb") as sink, pa.ipc.new_stream(sink, t.schema) as w:
        w.write_table(t)
    (saved / "state.json").write_text(json.dumps({"_data_files": [{"filename": "data-00000-of-00001.arrow"}]}))
    (data / "chat.jsonl").write_text("".join(json.dumps({"messages": r["messages"]}) + "\n" for r in ROWS))
    (data / "prompts.jsonl").write_text("".join(
        json.dumps({"prompt": r["messages"][-1]["content"], "completion": r["completion"]}) + "\n" for r in ROWS))
    (data / "trace.jsonl").write_text('{"input_len": 100, "output_len": 20}\n{"prompt": "hi", "max_tokens": 5}\n')
    (data / "mooncake.jsonl").write_text("".join(json.dumps(
        {"timestamp": ms, "input_length": 600, "output_length": 8, "hash_ids": [1, 2]}) + "\n"
        for ms in (0, 650_000, 700_000)))
    return folder


def test_the_page_has_a_snippet_for_every_format_and_key():
    text = "\n".join(SNIPPETS)
    assert len(SNIPPETS) >= 7
    for needle in ("sharegpt.json", ".parquet", "data/saved", "chat.jsonl", "trace:", "lengths: profile",
                   "order: file", "min_input_len", "fields:", "prompts.jsonl", "schedule: trace", "ramp:"):
        assert needle in text, needle


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_files(tmp_path_factory.mktemp("docs") / "profiles")


@pytest.mark.parametrize("k", range(len(SNIPPETS)))
def test_every_profile_in_docs_workloads_passes_validate(folder, k, capsys):
    p = folder / f"snippet{k}.yaml"
    p.write_text(SNIPPETS[k])
    assert main(["validate", str(p)]) == 0, capsys.readouterr().err
    assert "valid profile" in capsys.readouterr().out


def test_the_readme_links_the_page_once_and_stays_a_front_door():
    readme = (ROOT / "README.md").read_text()
    assert readme.count("(docs/workloads.md)") == 1 and len(readme.encode()) <= 15_000
