from __future__ import annotations

from pathlib import Path

import pytest

SHARED_LAMOST = Path(__file__).resolve().parents[2] / "shared" / "data" / "lamost"


@pytest.fixture
def shared_lamost_dir() -> Path:
    if not SHARED_LAMOST.exists():
        pytest.skip(f"the real LAMOST examples are not at {SHARED_LAMOST}")
    return SHARED_LAMOST


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings):
    # The default PBKDF2 hasher costs ~0.3 s per user; tests make many users.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
