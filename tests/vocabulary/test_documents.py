"""The run folder's typed documents (`loadgate.documents`) write what loadgate wrote before they
were typed, to the byte: tests/data/documents/ holds the files of one run (a check with protocol
checks, sampling contracts and a repeat scenario under `stable: true`; two levels, speculation on); each reads back into its type and
writes out identical. The files of every older run-folder version read too, and a key no type
knows is an error naming where."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from loadgate.documents import (
    ABSENT,
    AttestationDoc,
    DocumentError,
    ExactnessDoc,
    FingerprintFile,
    HealthPhase,
    ServerLevel,
)
from loadgate.jsonutil import dump_json, load_json
from tests.fixtures_path import DATA

GOLDEN = DATA / "documents"


def read(name: str, doc: object) -> object:
    """A file's document typed: per level for server.json and health.json."""
    d = load_json(doc) if isinstance(doc, Path) else doc
    if name == "server":
        return {lv: ServerLevel.from_json(v, f"server.json[{lv}]") for lv, v in d.items()}
    if name == "health":
        return {lv: [HealthPhase.from_json(h, f"health.json[{lv}]") for h in hs] for lv, hs in d.items()}
    cls = {"fingerprint": FingerprintFile, "attestation": AttestationDoc, "exactness": ExactnessDoc}[name]
    return cls.from_json(d, f"{name}.json")


def written(typed: object) -> object:
    if isinstance(typed, dict):
        return {k: written(v) for k, v in typed.items()}
    if isinstance(typed, list):
        return [written(v) for v in typed]
    return typed.to_json()  # type: ignore[attr-defined]


@pytest.mark.parametrize("name", ["server", "health", "fingerprint", "attestation", "exactness"])
def test_each_document_reads_into_its_type_and_writes_the_same_bytes(name, tmp_path):
    src = GOLDEN / f"{name}.json"
    dump_json(tmp_path / "out.json", written(read(name, src)))
    assert (tmp_path / "out.json").read_bytes() == src.read_bytes()


def test_the_golden_run_covers_what_is_written_only_sometimes():
    """The golden files hold the optional parts (so the test above exercises them)."""
    ex = read("exactness", GOLDEN / "exactness.json")
    att = read("attestation", GOLDEN / "attestation.json")
    assert isinstance(ex, ExactnessDoc) and isinstance(att, AttestationDoc)
    assert ex.protocol and ex.drift and ex.sampling and ex.contract and ex.contract.stable is True
    assert ex.baseline is not ABSENT and ex.bundles is not ABSENT
    assert att.protocol and att.drift and att.sampling and att.attestation_sha256
    server = read("server", GOLDEN / "server.json")
    assert len(server) == 2 and all(s.gauges and s.gauges["running"] is not None for s in server.values())


@pytest.mark.parametrize("version", ["runs-v1", "runs-v2", "runs-v3", "runs-v4", "runs-v5"])
def test_the_documents_of_older_run_folders_read(version):
    runs = [p for p in (DATA / version).iterdir() if p.is_dir()]
    assert runs
    for run in runs:
        for name in ("server", "health", "fingerprint", "attestation", "exactness"):
            if (run / f"{name}.json").exists():
                read(name, run / f"{name}.json")


def test_a_key_no_type_knows_is_an_error_naming_where():
    doc = orjson.loads((GOLDEN / "exactness.json").read_bytes())
    doc["non_identical"] = [{"scenario": "solo", "case": "a", "surprise": 1}]
    with pytest.raises(DocumentError, match=r"exactness\.json\.non_identical\[0\]: unknown key 'surprise'"):
        read("exactness", doc)
    with pytest.raises(DocumentError, match=r"server\.json\[2\]: expected a JSON object"):
        read("server", {"2": [1, 2]})
