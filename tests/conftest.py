from __future__ import annotations

from pathlib import Path

import pytest

from tests.factories import UserFactory

SHARED_LAMOST = Path(__file__).resolve().parents[2] / "shared" / "data" / "lamost"


@pytest.fixture
def shared_lamost_dir() -> Path:
    if not SHARED_LAMOST.exists():
        pytest.skip(f"the real LAMOST examples are not at {SHARED_LAMOST}")
    return SHARED_LAMOST


# --- the named actors (one set for every test) ---------------------------------------------------


@pytest.fixture
def owner(db):
    """An ML engineer who started the run or job under test."""
    return UserFactory(username="owner", roles=["ml_engineer"])


@pytest.fixture
def expert(db):
    return UserFactory(username="payne", roles=["expert"])


@pytest.fixture
def auditor(db):
    """An expert who audits; also an ML engineer, so the same person exports the dataset."""
    return UserFactory(username="auditor", roles=["expert", "ml_engineer"])


@pytest.fixture
def rater(db):
    return UserFactory(username="maury", roles=["rater"])


@pytest.fixture
def outsider(db):
    """An expert who has no part in the object under test."""
    return UserFactory(username="outsider", roles=["expert"])


@pytest.fixture
def staff(db):
    return UserFactory(username="stella", roles=["staff"])


@pytest.fixture
def viewer(db):
    return UserFactory(username="viewer", roles=["viewer"])


@pytest.fixture
def ml_engineer(db):
    return UserFactory(username="fleming", roles=["ml_engineer"])


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
