"""Tables of AB magnitudes (IRAF onedstds): recognised and converted, or refused; never flux.

The real files are two IRAF onedstds standards (tests/agent/data/onedstds/README.md); the
conversion is checked against astropy's own AB-magnitude equivalency, not our formula.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from astropy import units

from agent.spectra import Declared, SpectrumFormatError, load_spectra
from agent.spectra.declared import DeclarationError, parse_columns
from agent.spectra.magnitudes import FLUX_UNIT, looks_like_magnitudes

ONEDSTDS = Path(__file__).parent / "data" / "onedstds"
GD108 = ONEDSTDS / "gd108.dat"  # two columns, no header: wavelength, AB mag
EG21 = ONEDSTDS / "eg21blue.dat"  # three columns: wavelength, AB mag, bandpass


def astropy_flambda(mags: np.ndarray, vacuum_wave: np.ndarray) -> np.ndarray:
    flux = (mags * units.ABmag).to(
        units.erg / units.s / units.cm**2 / units.AA,
        units.spectral_density(vacuum_wave * units.AA),
    )
    return np.asarray(flux.value)


def refusal(path: Path, declared: Declared | None = None) -> str:
    with pytest.raises(SpectrumFormatError) as caught:
        load_spectra(path, declared=declared)
    message = str(caught.value)
    assert path.name in message
    return message


def test_it_refuses_a_real_headerless_onedstds_table_rather_than_read_magnitudes_as_flux() -> None:
    message = refusal(GD108)
    assert "looks like magnitudes" in message
    assert "'wavelength,ab_mag'" in message and "'Columns'" in message


def test_it_tells_how_to_declare_a_three_column_onedstds_table() -> None:
    assert "'wavelength,ab_mag,ignore'" in refusal(EG21)


def test_it_converts_a_declared_two_column_table_as_astropy_does() -> None:
    mags = np.loadtxt(GD108)[:, 1]
    spectrum = load_spectra(GD108, declared=Declared(columns=("wavelength", "ab_mag")))[0]
    np.testing.assert_allclose(spectrum.flux, astropy_flambda(mags, spectrum.wavelength), rtol=1e-9)
    assert spectrum.meta["flux_unit"] == FLUX_UNIT
    assert "48.60" in spectrum.meta["flux_from_ab_magnitudes"]["conversion"]
    # right way up: the brightest magnitude is the highest flux at the same wavelength scale
    assert np.argmax(spectrum.flux * spectrum.wavelength**2) == np.argmin(mags)


def test_it_converts_at_vacuum_wavelengths_when_air_is_declared() -> None:
    raw = np.loadtxt(EG21)
    declared = Declared(columns=("wavelength", "ab_mag", "ignore"), frame="air")
    spectrum = load_spectra(EG21, declared=declared)[0]
    assert np.all(spectrum.wavelength > raw[:, 0])  # stored in vacuum
    np.testing.assert_allclose(
        spectrum.flux, astropy_flambda(raw[:, 1], spectrum.wavelength), rtol=1e-9
    )
    assert spectrum.meta["ignored_columns"] == ["ignore (declared)"]


def write(tmp_path: Path, header: str, rows: list[str]) -> Path:
    path = tmp_path / "std.txt"
    path.write_text("\n".join([header, *rows]) + "\n")
    return path


ROWS = [f"{4000 + 10 * i} {12.0 + 0.01 * i:.3f} 0.02" for i in range(60)]


@pytest.mark.parametrize("header", ["wavelength ab_mag error", "wave flux[mag(AB)] err"])
def test_it_reads_a_header_naming_ab_magnitudes(tmp_path: Path, header: str) -> None:
    spectrum = load_spectra(write(tmp_path, header, ROWS))[0]
    mags = 12.0 + 0.01 * np.arange(60)
    np.testing.assert_allclose(spectrum.flux, astropy_flambda(mags, spectrum.wavelength), rtol=1e-9)
    # a 0.02 mag error is a 1.84 % flux error: sigma_f = f 0.4 ln(10) sigma_m
    sigma = 1.0 / np.sqrt(spectrum.ivar)
    np.testing.assert_allclose(sigma / spectrum.flux, 0.4 * np.log(10.0) * 0.02, rtol=1e-9)


@pytest.mark.parametrize("header", ["wavelength mag error", "wavelength flux[mag] error"])
def test_it_refuses_magnitudes_in_no_stated_system(tmp_path: Path, header: str) -> None:
    message = refusal(write(tmp_path, header, ROWS))
    assert "does not say they are AB" in message and "ab_mag" in message


def test_it_refuses_a_magnitude_error_in_flux_units(tmp_path: Path) -> None:
    message = refusal(write(tmp_path, "wavelength ab_mag error[erg/s/cm2/A]", ROWS))
    assert "not read as the magnitudes' uncertainty" in message


def test_it_masks_placeholder_magnitudes(tmp_path: Path) -> None:
    rows = [*ROWS[:30], "4300 99.0 0.02", *ROWS[31:]]
    spectrum = load_spectra(write(tmp_path, "wavelength ab_mag error", rows))[0]
    assert spectrum.mask[30] and not spectrum.mask[29]


def test_it_still_reads_a_headerless_flux_in_physical_units(tmp_path: Path) -> None:
    path = tmp_path / "flux.dat"
    flux = 1e-15 * (1.0 + 0.1 * np.sin(np.arange(60)))
    path.write_text("".join(f"{4000 + 10 * i} {f:.6e}\n" for i, f in enumerate(flux)))
    np.testing.assert_allclose(load_spectra(path)[0].flux, flux, rtol=1e-6)


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        (np.array([11.45, 11.39, 12.0, 13.1]), True),
        (np.array([1e-16, 2e-16, 3e-16]), False),
        (np.array([0.9, 1.0, 1.1]), False),  # a normalised flux
        (np.array([-3.0, 8.0, 12.0]), False),  # counts with noise below zero
        (np.array([12.0, 45.0]), False),
    ],
)
def test_it_tells_magnitude_like_values(values: np.ndarray, expected: bool) -> None:
    assert looks_like_magnitudes(values) is expected


def test_it_accepts_declared_ab_magnitudes_and_refuses_two_spectra() -> None:
    assert parse_columns("wavelength, ab_mag, ignore") == ("wavelength", "ab_mag", "ignore")
    with pytest.raises(DeclarationError, match="exactly one 'flux' or 'ab_mag'"):
        parse_columns("wavelength, flux, ab_mag")
    with pytest.raises(DeclarationError, match="'ivar' beside 'ab_mag'"):
        parse_columns("wavelength, ab_mag, ivar")


def test_it_refuses_a_fits_table_whose_flux_is_in_magnitudes(tmp_path: Path) -> None:
    from astropy.io import fits

    wave = 4000.0 + 10.0 * np.arange(60)
    table = fits.BinTableHDU.from_columns(
        [
            fits.Column(name="WAVELENGTH", format="D", unit="Angstrom", array=wave),
            fits.Column(name="FLUX", format="D", unit="mag", array=np.full(60, 12.0)),
        ]
    )
    path = tmp_path / "std.fits"
    fits.HDUList([fits.PrimaryHDU(), table]).writeto(path)
    message = refusal(path)
    assert "magnitudes, not flux" in message


def test_it_refuses_a_declaration_built_in_code_without_a_flux_or_magnitude_column(
    tmp_path: Path,
) -> None:
    """IRAF onedstds also ships one-column tables (ctio/multi1m.dat, an extinction list): a
    declaration of just 'wavelength' once reached the table reader and escaped it as a bare
    StopIteration, which ``agent.bench.shift --onedstds`` did not catch."""
    with pytest.raises(DeclarationError, match="exactly one 'flux' or 'ab_mag'"):
        Declared(columns=("wavelength",))
    with pytest.raises(DeclarationError, match="is not one of"):
        Declared(columns=("wavelength", "magnitude"))
    table = tmp_path / "one.dat"
    table.write_text("\n".join(f"{3200 + 50 * i:.1f}" for i in range(80)) + "\n")
    with pytest.raises(ValueError, match="exactly one 'flux' or 'ab_mag'"):
        load_spectra(table, declared=Declared(columns=("wavelength",)))
