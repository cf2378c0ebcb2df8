"""The GPU recipe (benchmarks/gpu/) runs where nothing can be fetched: its package list must cover
every runtime dependency, a failed step must say so, and its archive must unpack into
docs/validation/'s layout."""

from __future__ import annotations

import importlib.metadata as md
import re
import subprocess
import sys
import tarfile
import tomllib

from tests.fixtures_path import REPO

GPU = REPO / "benchmarks" / "gpu"


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(spec: str) -> str:
    return norm(re.split(r"[\s<>=!~;\[(]", spec.strip(), maxsplit=1)[0])


def packages() -> dict[str, str]:
    """packages.txt: name -> "image" or "carried"."""
    out = {}
    for line in (GPU / "packages.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            where, spec = line.split()
            assert where in ("image", "carried"), line
            out[requirement_name(spec)] = where
    return out


def test_every_runtime_dependency_is_on_the_image_or_carried():
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    listed = packages()
    missing = [d for d in deps if requirement_name(d) not in listed]
    assert not missing, f"add them to benchmarks/gpu/packages.txt: {missing}"


def test_every_requirement_of_a_carried_package_is_there_too():
    """From the installed packages' own metadata (the ones this environment has)."""
    listed = packages()
    checked = 0
    for name, where in listed.items():
        if where != "carried":
            continue
        try:
            reqs = md.requires(name) or []
        except md.PackageNotFoundError:
            continue  # gguf: the models' converter, not installed with loadgate
        checked += 1
        for r in reqs:
            if "extra ==" in r:
                continue
            marker = r.split(";", 1)[1] if ";" in r else ""
            if "python_version >= '3.13'" in marker or "python_version < '3.11'" in marker:
                continue  # not for the device's Python 3.12
            assert requirement_name(r) in listed, f"{name} needs {r}: add it to benchmarks/gpu/packages.txt"
    assert checked >= 4  # orjson, jsonschema and its three


def test_the_carried_pins_are_the_versions_this_environment_tests_with():
    for line in (GPU / "packages.txt").read_text().splitlines():
        if line.startswith("carried ") and "==" in line:
            name, version = line.split()[1].split("==")
            try:
                assert md.version(name) == version, f"{name}: tested with {md.version(name)}, carried {version}"
            except md.PackageNotFoundError:
                pass


def test_a_failed_step_writes_failed_naming_it(tmp_path):
    """Run where there is nothing to install: the first step fails, FAILED names it, no DONE."""
    work = tmp_path / "w"
    proc = subprocess.run(["bash", str(GPU / "pipeline.sh"), str(work)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode != 0
    assert (work / "FAILED").read_text().startswith("step wheels failed")
    assert not (work / "DONE").exists()
    assert "FAILED at wheels" in (work / "pipeline.log").read_text()


def test_the_documented_poll_stops_on_failed_as_on_done():
    text = (GPU / "README.md").read_text()
    polls = [line for line in text.splitlines() if "DONE" in line and "sleep" in line]
    assert polls and all("FAILED" in p for p in polls), polls


def test_the_archive_unpacks_into_the_layout_of_docs_validation(tmp_path):
    val, models = tmp_path / "val", tmp_path / "models"
    (val / "logs").mkdir(parents=True)
    (val / "results.json").write_text("{}")
    (val / "logs" / "restart-bit-exact.txt").write_text("report")
    (val / "logs" / "server-1-plain-4000.log").write_text("server log: left out")
    run = val / "work" / "runs" / "spec-solo-performance"
    (run / "B1").mkdir(parents=True)
    for f in ("comparison.json", "verdict.json", "ab.json"):
        (run / f).write_text("{}")
    (run / "B1" / "summary.json").write_text("{}")
    (run / "B1" / "records.jsonl").write_text("{}\n")
    (run / "B1" / "stdout.txt").write_text("left out\n")
    models.mkdir()
    (models / "models.json").write_text("{}")
    (tmp_path / "pipeline.log").write_text("[0s] wheels")
    out = tmp_path / "v.tar.gz"
    subprocess.run([sys.executable, str(GPU / "pack.py"), "--val", str(val), "--models", str(models), "--work",
                    str(tmp_path), "--out", str(out)], check=True, capture_output=True)
    with tarfile.open(out) as tar:
        names = sorted(tar.getnames())
    assert names == ["models.json", "pipeline.log", "restart-bit-exact.txt", "results.json",
                     "spec-solo-performance/B1/records.jsonl", "spec-solo-performance/B1/summary.json",
                     "spec-solo-performance/ab.json",
                     "spec-solo-performance/comparison.json", "spec-solo-performance/verdict.json"]
    existing = {p.relative_to(REPO / "docs" / "validation").as_posix()
                for p in (REPO / "docs" / "validation").rglob("*") if p.is_file()}
    assert {"results.json", "models.json", "pipeline.log", "restart-bit-exact.txt"} <= existing
