"""The test settings that speed the suite hold in module-scoped fixtures too: those run before
any function-scoped fixture, and the security worlds (tests/web/security_world.py, the blinding
world) build users and run inspections in them."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from django.db import transaction

from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def module_scoped(django_db_setup, django_db_blocker) -> Iterator[dict[str, str]]:
    with django_db_blocker.unblock(), transaction.atomic():
        user = UserFactory(username="module-scoped")
        yield {"password": user.password, "library": os.environ.get("SPECVET_LIBRARY", "")}
        transaction.set_rollback(True)


def test_it_hashes_passwords_with_the_fast_hasher_in_module_scoped_fixtures(module_scoped):
    # PBKDF2 (Django's default) costs ~0.4 s of CPU a user, seconds on a loaded machine.
    assert module_scoped["password"].startswith("md5$")


def test_it_switches_the_library_off_in_module_scoped_fixtures(module_scoped):
    assert module_scoped["library"] == "off"


def test_it_refuses_to_hand_back_another_spectrum_with_the_same_pixels(cv) -> None:
    """make_spectrum stores each set of pixels once: asking for a second object with the same
    pixels fails at once, naming the stored one (a queued spectrum came back as an unlabelled
    viewer spectrum of the same seed, and a page test failed far from the cause)."""
    from tests.factories import make_spectrum

    first = make_spectrum(object_id="VIEWER-1", seed=0)
    assert make_spectrum(object_id="VIEWER-1", seed=0) == first
    with pytest.raises(AssertionError, match="already stored in data set 'tests' as"):
        make_spectrum(object_id="Q0", seed=0, task=cv, label="YES")
    assert make_spectrum(object_id="Q0", seed=1, task=cv, label="YES") != first
