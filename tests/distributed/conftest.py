"""The Ray tests' marks and cluster (tests/raycluster.py)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.raycluster import local_cluster

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.is_relative_to(HERE):
            item.add_marker(pytest.mark.ray)


@pytest.fixture(scope="session")
def ray_temp() -> Iterator[Path]:
    """Ray's temp folder, short (its sockets' paths must stay under 108 bytes: pytest's own temp
    folders, under an xdist worker's, can be longer)."""
    path = Path(tempfile.mkdtemp(prefix="lgray-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def cluster(ray_temp: Path) -> Iterator[Any]:
    with local_cluster(ray_temp) as c:
        yield c
