"""The reader's figures on the real corpus (agent/real_reading.py), and the specutils cross-check
of the new layouts where specutils is installed (it is not a dependency: those tests skip)."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import numpy as np
import pytest
from astropy.io import fits

from agent import real_corpus
from agent.real_reading import (
    cross_check,
    reading_figures,
    reason_class,
    report,
    shipped_file,
    wheel_figures,
)
from agent.spectra import load_spectra


@pytest.fixture(scope="module")
def entries() -> list:
    try:
        real_corpus.fetch(download=False, quiet=True)
    except real_corpus.CorpusUnavailable as exc:
        pytest.skip(f"the real-data cache is not built here: {exc}")
    return real_corpus.load_manifest()


def test_it_reads_every_real_file_of_the_corpus_as_shipped(entries: list) -> None:
    figures = reading_figures(entries, with_specutils=False)
    refused = {o.id: o.reason for o in figures.outcomes if not o.read}
    assert refused == {}
    assert figures.read == figures.files == len(entries)
    assert f"{len(entries)} files, read as shipped: {len(entries)} read" in report(figures)


def test_it_reports_each_file_with_its_own_pixel_count(entries: list, tmp_path: Path) -> None:
    sample = entries[:: max(1, len(entries) // 12)]
    figures = reading_figures(sample, with_specutils=False)
    for entry, outcome in zip(sample, figures.outcomes, strict=True):
        assert outcome.id == entry.id
        assert outcome.pixels == len(load_spectra(shipped_file(entry, tmp_path))[0])


def test_it_groups_refusals_without_the_path_and_the_numbers() -> None:
    message = "/tmp/x/a.fits: not a spectrum: 10 pixels; a spectrum needs at least 50"
    assert reason_class(message, "/tmp/x/a.fits") == (
        "not a spectrum: N pixels; a spectrum needs at least N"
    )


def test_it_reads_the_fits_members_of_a_wheel_each_with_its_own_outcome(tmp_path: Path) -> None:
    wheel = tmp_path / "library.whl"
    good = io.BytesIO()
    hdu = fits.PrimaryHDU(np.ones(100, dtype=np.float32))
    hdu.header.update({"CRVAL1": 4000.0, "CDELT1": 1.0, "CRPIX1": 1.0})
    hdu.writeto(good)
    short = io.BytesIO()
    fits.PrimaryHDU(np.ones(10, dtype=np.float32), header=hdu.header).writeto(short)
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("lib/data/a_short.fits", short.getvalue())
        archive.writestr("lib/data/b_good.fits", good.getvalue())
        archive.writestr("lib/data/readme.txt", "not a spectrum file name")
        archive.writestr("lib/other/c.fits", good.getvalue())
    figures = wheel_figures(wheel, "lib/data/", with_specutils=False)
    assert [(o.id, o.read, o.pixels) for o in figures.outcomes] == [
        ("lib/data/a_short.fits", False, 0),
        ("lib/data/b_good.fits", True, 100),
    ]
    assert figures.refusals == {"not a spectrum: N pixels; a spectrum needs at least N": 1}


# --- specutils, where installed --------------------------------------------------------------


def test_it_says_when_specutils_is_not_there_to_cross_check(tmp_path: Path) -> None:
    path = tmp_path / "s.fits"
    hdu = fits.PrimaryHDU(np.ones(100, dtype=np.float32))
    hdu.header.update({"CRVAL1": 4000.0, "CDELT1": 1.0})  # no CRPIX1: 0 by the standard
    hdu.writeto(path)
    verdict = cross_check(path, load_spectra(path)[0])
    try:
        import specutils  # noqa: F401
    except ImportError:
        assert verdict == "not installed"
    else:
        assert verdict == "agrees"


@pytest.mark.parametrize("cards", [{"CRVAL1": 4000.0, "CDELT1": 2.0, "CUNIT1": "Angstrom"}])
def test_it_reads_a_1d_wcs_image_as_specutils_does(tmp_path: Path, cards: dict) -> None:
    specutils = pytest.importorskip("specutils")
    path = tmp_path / "wcs1d.fits"
    hdu = fits.PrimaryHDU(np.linspace(1.0, 2.0, 300).astype(np.float32))
    hdu.header.update({**cards, "CRPIX1": 1.0, "CTYPE1": "WAVE", "BUNIT": "erg / (s cm2 Angstrom)"})
    hdu.writeto(path)
    theirs = specutils.Spectrum.read(str(path), format="wcs1d-fits")
    ours = load_spectra(path)[0]
    np.testing.assert_allclose(ours.wavelength, theirs.spectral_axis.to_value("Angstrom"))
    np.testing.assert_allclose(ours.flux, theirs.flux.value)


def test_it_reads_a_per_pixel_table_as_specutils_does(tmp_path: Path) -> None:
    specutils = pytest.importorskip("specutils")
    wave = np.linspace(3500.0, 9000.0, 400)
    table = fits.BinTableHDU.from_columns(
        [
            fits.Column(name="wavelength", format="D", unit="Angstrom", array=wave),
            fits.Column(name="flux", format="D", unit="erg / (s cm2 Angstrom)", array=wave / 5e3),
        ]
    )
    fits.HDUList([fits.PrimaryHDU(), table]).writeto(tmp_path / "t.fits")
    theirs = specutils.Spectrum.read(str(tmp_path / "t.fits"), format="tabular-fits")
    ours = load_spectra(tmp_path / "t.fits")[0]
    np.testing.assert_allclose(ours.wavelength, theirs.spectral_axis.to_value("Angstrom"))
    np.testing.assert_allclose(ours.flux, theirs.flux.value)
    assert cross_check(tmp_path / "t.fits", ours) == "agrees"
