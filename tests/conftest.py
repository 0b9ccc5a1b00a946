from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

# One thread per numeric library (torch, OpenBLAS, OpenMP: faiss), here and in the workers the
# tests start. The tests' models and arrays are tiny, and on a shared 2-core machine spinning
# threads waiting for each other cost 5-20x: the tiny Qwen's generate() took 6-7 s of wall time
# on 2 threads against 0.3 s on one (load ~12). Set before torch and faiss load (they read it
# then); numpy's OpenBLAS is loaded already (Django's app registry imports it), so it is limited
# through threadpoolctl. An explicit setting in the environment wins.
for _variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")
if os.environ["OPENBLAS_NUM_THREADS"] == "1":
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=1, user_api="blas")

from agent.real_corpus import LAMOST_DIR  # noqa: E402  (after the thread limits)
from tests.factories import UserFactory  # noqa: E402

# The two real LAMOST spectra ship inside the project (agent/data/lamost): a bare clone has them,
# so no test skips for want of ../shared.
SHARED_LAMOST = LAMOST_DIR


@pytest.fixture
def shared_lamost_dir() -> Path:
    return LAMOST_DIR


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


@pytest.fixture(scope="session", autouse=True)
def _fast_password_hashing() -> Iterator[None]:
    """The default PBKDF2 hasher costs ~0.5 s per user (seconds under load); tests make many.
    Session scope: the module- and session-scoped worlds (tests/web/security_world.py, the
    blinding world) make their users before any function-scoped fixture runs."""
    from django.test import override_settings

    with override_settings(PASSWORD_HASHERS=["django.contrib.auth.hashers.MD5PasswordHasher"]):
        yield


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
