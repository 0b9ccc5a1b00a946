"""Instrumental resolution: the value, where readers find it, and the width correction."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from agent.real_corpus import LAMOST_DIR
from agent.resolution import (
    C_KMS,
    Resolution,
    ResolutionError,
    intrinsic_fwhm,
    is_resolved,
    parse_user_value,
    survey_default,
)
from agent.spectra import (
    Spectrum,
    load_spectra,
    spectrum_from_npz_bytes,
    spectrum_to_npz_bytes,
)
from tests.agent import survey_fixtures

SHARED_LAMOST = LAMOST_DIR


def test_it_keeps_the_resolving_power_constant_for_a_constant_r_resolution() -> None:
    resolution = Resolution.constant_r(1800.0, source="survey default")
    for wavelength in (3700.0, 6000.0, 12000.0):
        assert resolution.resolving_power_at(wavelength) == pytest.approx(1800.0)
    assert resolution.velocity_fwhm_at(5000.0) == pytest.approx(C_KMS / 1800.0)


def test_it_interpolates_fwhm_between_nodes() -> None:
    resolution = Resolution((4000.0, 6000.0, 8000.0), (2.0, 3.0, 5.0), "file")
    assert resolution.fwhm_at(7000.0) == pytest.approx(4.0)
    assert resolution.fwhm_at(3000.0) == pytest.approx(2.0)  # constant beyond the ends


@pytest.mark.parametrize(
    ("text", "fwhm_at_5000"),
    [("1800", 5000.0 / 1800.0), ("R=2500", 2.0), ("2.5 A", 2.5), ("fwhm=3", 3.0)],
)
def test_it_reads_a_typed_resolution(text: str, fwhm_at_5000: float) -> None:
    parsed = parse_user_value(text)
    assert parsed.source == "user"
    assert parsed.fwhm_at(5000.0) == pytest.approx(fwhm_at_5000)


def test_it_reads_a_velocity_resolution() -> None:
    assert parse_user_value("150 km/s").velocity_fwhm_at(6000.0) == pytest.approx(150.0)


@pytest.mark.parametrize("text", ["fast", "-5", "0 A", "R=0"])
def test_it_refuses_a_resolution_it_cannot_read(text: str) -> None:
    with pytest.raises(ResolutionError):
        parse_user_value(text)


def test_it_refuses_nodes_out_of_order() -> None:
    with pytest.raises(ResolutionError, match="increasing"):
        Resolution((5000.0, 4000.0), (1.0, 1.0), "file")


def test_it_subtracts_the_instrumental_width_in_quadrature() -> None:
    assert intrinsic_fwhm(500.0, 300.0) == pytest.approx(400.0)
    assert intrinsic_fwhm(200.0, 300.0) == 0.0
    assert is_resolved(500.0, 300.0) and not is_resolved(320.0, 300.0)


def test_it_estimates_a_bare_table_from_its_sampling() -> None:
    wave = np.arange(4000.0, 7000.0, 5.0)
    resolution = survey_default("table", wave)
    assert resolution.source == "sampling estimate"
    assert resolution.fwhm_at(5000.0) == pytest.approx(10.0)


def test_it_gives_every_spectrum_a_resolution_from_its_survey() -> None:
    wave = np.linspace(3800.0, 9000.0, 100)
    spectrum = Spectrum(wave, np.ones(100), survey="LAMOST")
    assert spectrum.resolution is not None
    assert spectrum.resolution.resolving_power_at(6000.0) == pytest.approx(1800.0)
    desi = Spectrum(wave, np.ones(100), survey="DESI")
    assert desi.resolution is not None
    assert desi.resolution.resolving_power_at(3600.0) == pytest.approx(2000.0)


def test_it_reads_the_resolution_directive_of_a_table(tmp_path: Path) -> None:
    path = tmp_path / "star.txt"
    rows = "\n".join(f"{4000 + i} {1.0 + 0.01 * i}" for i in range(50))
    path.write_text(f"# resolution: 2000\nwavelength flux\n{rows}\n", encoding="utf-8")
    spectrum = load_spectra(path)[0]
    assert spectrum.resolution is not None and spectrum.resolution.source == "file"
    assert spectrum.resolution.resolving_power_at(5000.0) == pytest.approx(2000.0)


def test_it_takes_the_sdss_resolution_from_wdisp(tmp_path: Path) -> None:
    path = tmp_path / "spec.fits"
    survey_fixtures.write_sdss_spec(path)
    spectrum = load_spectra(path)[0]
    assert spectrum.resolution is not None and spectrum.resolution.source == "file"
    # the fixture's wdisp is 1.1 pixels of 1e-4 dex: FWHM = 2.355 * 1.1 * ln(10) * 1e-4 * lambda
    expected = 2.0 * math.sqrt(2.0 * math.log(2.0)) * 1.1 * math.log(10.0) * 1e-4
    wavelength = float(np.median(spectrum.wavelength))
    assert spectrum.resolution.fwhm_at(wavelength) / wavelength == pytest.approx(expected, rel=0.01)


def test_it_keeps_the_resolution_through_npz_bytes() -> None:
    wave = np.linspace(4000.0, 5000.0, 50)
    spectrum = Spectrum(wave, np.ones(50), resolution=parse_user_value("R=999"))
    restored = spectrum_from_npz_bytes(spectrum_to_npz_bytes(spectrum))
    assert restored.resolution == spectrum.resolution


def test_it_gives_the_real_lamost_files_the_survey_resolution() -> None:
    for path in sorted(SHARED_LAMOST.glob("*.fits.gz")):
        spectrum = load_spectra(path)[0]
        assert spectrum.resolution is not None
        assert spectrum.resolution.source == "survey default"
        assert spectrum.resolution.resolving_power_at(6000.0) == pytest.approx(1800.0)
