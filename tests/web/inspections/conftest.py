"""Fixtures shared by the inspection tests (the actors are in tests/conftest.py)."""

from __future__ import annotations

import pytest

from annotation.spectra.models import Task


@pytest.fixture
def cv(db):
    return Task.objects.get(code="CV")
