"""The Ray tests' marks and cluster (tests/raycluster.py)."""

from __future__ import annotations

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
def ray_temp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("raytmp")


@pytest.fixture(scope="session")
def cluster(ray_temp: Path) -> Iterator[Any]:
    with local_cluster(ray_temp) as c:
        yield c
