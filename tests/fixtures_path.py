"""Where the shared recorded engine responses live: $LOADGATE_SHARED, else ../shared beside the repo."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def shared_dir() -> Path:
    env = os.environ.get("LOADGATE_SHARED")
    return Path(env) if env else REPO.parent / "shared"


def fixture_file(*parts: str) -> Path:
    p = shared_dir().joinpath("fixtures", *parts)
    if not p.exists():
        pytest.skip(f"recorded fixture {p} not present (set LOADGATE_SHARED)")
    return p
