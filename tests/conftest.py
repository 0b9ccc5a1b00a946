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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Refuse transactional tests that would leave the next one a database it cannot restore.

    A transactional test flushes the database when it ends. Without serialized_rollback, the
    flush re-creates content types under new ids, and the next test that restores the serialized
    database (the seeded tasks included) then fails on duplicate content types.
    """
    offenders = [
        item.nodeid
        for item in items
        if (marker := item.get_closest_marker("django_db")) is not None
        and marker.kwargs.get("transaction")
        and not marker.kwargs.get("serialized_rollback")
    ]
    if offenders:
        raise pytest.UsageError(
            "transactional tests must also set serialized_rollback=True: " + ", ".join(offenders)
        )
