"""The sky spectrum the readers keep (issue 26: the viewer's compare panel draws it)."""

from __future__ import annotations

import numpy as np
import pytest

from agent.reading import SpectrumFormatError
from agent.spectra import Spectrum, load_spectra, spectrum_from_npz_bytes, spectrum_to_npz_bytes
from tests.agent.survey_fixtures import write_sdss_spec


def test_it_keeps_the_sdss_sky_column(tmp_path):
    path = tmp_path / "spec-0266-51602-0001.fits"
    write_sdss_spec(path, n_pixels=300)
    spectrum = load_spectra(path)[0]
    assert spectrum.sky is not None and spectrum.sky.shape == spectrum.flux.shape
    assert np.all(spectrum.sky == 3.0)  # the fixture's sky


def test_it_stores_the_sky_with_the_arrays_and_reads_it_back(tmp_path):
    path = tmp_path / "spec-0266-51602-0001.fits"
    write_sdss_spec(path, n_pixels=300)
    spectrum = load_spectra(path)[0]
    again = spectrum_from_npz_bytes(spectrum_to_npz_bytes(spectrum))
    assert again.sky is not None and np.array_equal(again.sky, spectrum.sky)


def test_it_has_no_sky_where_the_file_has_none():
    wave = np.linspace(4000.0, 5000.0, 50)
    spectrum = Spectrum(wavelength=wave, flux=np.ones(50))
    assert spectrum_from_npz_bytes(spectrum_to_npz_bytes(spectrum)).sky is None


def test_it_refuses_a_sky_on_another_grid():
    with pytest.raises(SpectrumFormatError):
        Spectrum(wavelength=np.linspace(4000.0, 5000.0, 50), flux=np.ones(50), sky=np.ones(49))
