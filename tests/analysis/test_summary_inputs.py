"""A run's summary reads server.json and health.json into their types (`loadgate.documents`):
the saved runs of every version give the summary they gave, and a file without its shape is one
error naming the file and the place (the report's "not a complete run folder" quotes it), not a
KeyError deep in the summary."""

from __future__ import annotations

import shutil
from pathlib import Path

import orjson
import pytest

from loadgate.analysis.summary import build_summary
from loadgate.documents import DocumentError
from tests.fixtures_path import DATA

SAVED = sorted(DATA.glob("runs-v*/single"))


@pytest.mark.parametrize("run", SAVED, ids=[p.parent.name for p in SAVED])
def test_saved_runs_give_their_gauges_and_health_through_the_types(run: Path) -> None:
    level = next(iter(orjson.loads((run / "server.json").read_bytes())))
    s = build_summary(run).levels[level]
    raw = orjson.loads((run / "server.json").read_bytes())[level]
    assert s.server_gauges == raw.get("gauges")
    parts = [p for p in orjson.loads((run / "health.json").read_bytes())[level] if p]
    assert s.client_health.workers == len(parts) > 0
    assert s.client_health.loop_lag_ms["samples"] == sum(p["loop_lag_ms"]["samples"] for p in parts)
    assert s.client_health.loop_lag_ms["p99"] == max(p["loop_lag_ms"]["p99"] for p in parts)


@pytest.mark.parametrize(("name", "doc", "words"), [
    ("server.json", {"16": {"before": [], "after": [], "bogus": 1}}, "level 16: unknown key 'bogus' (a newer loadgate wrote it?)"),
    ("server.json", {"16": {"gauges": {"running": [1, 2]}}}, "level 16.gauges.running: expected a JSON object, got list"),
    ("server.json", [1], "expected a JSON object, got list"),
    ("health.json", {"16": {"cpu_s": 1}}, "level 16: expected a JSON array, got dict"),
    ("health.json", {"16": [{"cpu_s": 1, "loop_lag": {}}]}, "level 16[0]: unknown key 'loop_lag' (a newer loadgate wrote it?)"),
])
def test_a_per_level_file_without_its_shape_is_one_error_naming_it(tmp_path: Path, name: str, doc: object,
                                                                   words: str) -> None:
    run = tmp_path / "single"
    shutil.copytree(DATA / "runs-v4" / "single", run)
    (run / name).write_bytes(orjson.dumps(doc))
    with pytest.raises(DocumentError) as e:
        build_summary(run)
    assert str(e.value) == f"{name}: {words}"
