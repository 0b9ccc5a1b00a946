"""The redshift fit is stored in the shared cache for every process (issue 37): a stored fit is
the uncached fit of the same input, and a new fit version, other templates or other pixels are
fitted again."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.cache import caches

from agent.redshift_templates import TemplateSet, synthetic_templates
from annotation.spectra import selectors
from tests.factories import make_galaxy_spectrum

pytestmark = pytest.mark.django_db

FIXED = TemplateSet(synthetic_templates(), "synthetic", "synthetic templates (tests)")


@pytest.fixture(autouse=True)
def _synthetic_template_set(monkeypatch):
    monkeypatch.setattr(selectors, "redshift_template_set", lambda: FIXED)


@pytest.fixture
def fits_run(monkeypatch) -> list[str]:
    """The content hashes the fit itself ran on, in order (a stored answer runs none)."""
    ran: list[str] = []
    real = selectors._redshift_fit_uncached

    def counted(row: Any, template_set: TemplateSet, n_best: int) -> dict[str, Any]:
        ran.append(row.content_hash)
        return real(row, template_set, n_best)

    monkeypatch.setattr(selectors, "_redshift_fit_uncached", counted)
    return ran


def _new_process() -> None:
    """What another worker or a restart sees: nothing kept in this process's memory."""
    selectors._redshift_fits.clear()


def _forget(row: Any) -> None:
    caches["default"].delete(selectors.redshift_fit_key(row, FIXED, 5))
    _new_process()


def _without_seconds(fit: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in fit.items() if key != "seconds"}


def test_it_answers_another_process_with_the_stored_fit_of_the_same_input(fits_run):
    row = make_galaxy_spectrum(z=0.2345)
    _forget(row)
    first = selectors.spectrum_redshift_fit(row)
    _new_process()
    again = selectors.spectrum_redshift_fit(row)
    assert fits_run == [row.content_hash]  # the second process read the stored fit
    assert again == first
    uncached = selectors._redshift_fit_uncached(row, FIXED, 5)
    assert _without_seconds(again) == _without_seconds(uncached)
    assert abs(again["candidates"][0]["z"] - 0.2345) < 1e-3


def test_it_fits_again_for_a_new_fit_version(fits_run, monkeypatch):
    row = make_galaxy_spectrum(z=0.12)
    _forget(row)
    selectors.spectrum_redshift_fit(row)
    monkeypatch.setattr(selectors, "FIT_VERSION", "test-next")
    _new_process()
    selectors.spectrum_redshift_fit(row)
    assert fits_run == [row.content_hash, row.content_hash]


def test_it_fits_again_against_other_templates(fits_run, monkeypatch):
    row = make_galaxy_spectrum(z=0.12)
    _forget(row)
    selectors.spectrum_redshift_fit(row)
    fewer = TemplateSet(FIXED.templates[:-1], "synthetic", "one template fewer")
    assert fewer.fingerprint != FIXED.fingerprint
    monkeypatch.setattr(selectors, "redshift_template_set", lambda: fewer)
    _new_process()
    selectors.spectrum_redshift_fit(row)
    assert fits_run == [row.content_hash, row.content_hash]


def test_it_keeps_the_fits_of_different_pixels_apart(fits_run):
    near, far = make_galaxy_spectrum(z=0.1), make_galaxy_spectrum(z=0.4)
    _forget(near)
    _forget(far)
    near_z = selectors.spectrum_redshift_fit(near)["candidates"][0]["z"]
    _new_process()
    far_z = selectors.spectrum_redshift_fit(far)["candidates"][0]["z"]
    assert fits_run == [near.content_hash, far.content_hash]
    assert abs(near_z - 0.1) < 1e-3 and abs(far_z - 0.4) < 1e-3
