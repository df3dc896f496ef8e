"""Shared fixtures: the real data folder (skip when absent) and small record tables."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REAL = Path(os.environ.get("GRADUS_REAL_DATA", Path(__file__).resolve().parents[1].parent / "shared" / "data"))


@pytest.fixture(scope="session")
def real_data() -> Path:
    if not REAL.is_dir():
        pytest.skip(f"real data folder {REAL} is absent")
    return REAL
