"""Property tests of load_spectra: round trips, sorting, masking, and garbage in -> clear error."""

from __future__ import annotations

import gzip
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
from astropy.io import fits
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from agent.spectra import MIN_SPECTRUM_PIXELS, Spectrum, SpectrumFormatError, load_spectra
from tests.agent.survey_fixtures import (
    write_desi_coadd,
    write_lamost_new,
    write_lamost_old,
    write_sdss_spec,
    write_table_ascii,
    write_table_csv,
    write_table_npz,
)

PROPERTY_SETTINGS = settings(
    max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)

wavelength_grids = st.lists(
    st.floats(min_value=1000.0, max_value=30000.0, allow_nan=False),
    min_size=MIN_SPECTRUM_PIXELS,
    max_size=MIN_SPECTRUM_PIXELS + 30,
    unique=True,
).map(sorted)
finite_flux = st.floats(min_value=-1e30, max_value=1e30, allow_nan=False, allow_infinity=False)
errors = st.floats(min_value=1e-3, max_value=1e3)
any_flux = st.one_of(finite_flux, st.sampled_from([float("nan"), float("inf"), float("-inf")]))


@contextmanager
def scratch_file(name: str) -> Iterator[Path]:
    with tempfile.TemporaryDirectory() as folder:
        yield Path(folder) / name


def load_one(path: Path) -> Spectrum:
    spectra = load_spectra(path)
    assert len(spectra) == 1
    return spectra[0]


@st.composite
def tables(draw: st.DrawFn) -> tuple[list[float], list[float], list[float]]:
    wavelength = draw(wavelength_grids)
    size = len(wavelength)
    flux = draw(st.lists(finite_flux, min_size=size, max_size=size))
    error = draw(st.lists(errors, min_size=size, max_size=size))
    return wavelength, flux, error


@PROPERTY_SETTINGS
@given(table=tables(), writer=st.sampled_from([write_table_csv, write_table_ascii]))
def test_it_round_trips_random_text_tables_exactly(table, writer) -> None:
    wavelength, flux, error = table
    with scratch_file("table.txt") as path:
        spectrum = load_one(writer(path, wavelength, flux, error))
    np.testing.assert_array_equal(spectrum.wavelength, wavelength)
    np.testing.assert_array_equal(spectrum.flux, flux)
    np.testing.assert_array_equal(spectrum.ivar, 1.0 / np.array(error) ** 2)
    assert not spectrum.mask.any()


@PROPERTY_SETTINGS
@given(table=tables())
def test_it_round_trips_random_npz_tables_exactly(table) -> None:
    wavelength, flux, error = table
    with scratch_file("table.npz") as path:
        spectrum = load_one(write_table_npz(path, wavelength=wavelength, flux=flux, error=error))
    np.testing.assert_array_equal(spectrum.wavelength, wavelength)
    np.testing.assert_array_equal(spectrum.flux, flux)
    np.testing.assert_array_equal(spectrum.ivar, 1.0 / np.array(error) ** 2)


@PROPERTY_SETTINGS
@given(table=tables(), data=st.data())
def test_it_refuses_random_shuffles_and_reverses_a_decreasing_grid(table, data) -> None:
    wavelength, flux, _ = table
    order = data.draw(st.permutations(range(len(wavelength))))
    with scratch_file("shuffled.csv") as path:
        write_table_csv(path, [wavelength[i] for i in order], [flux[i] for i in order])
        steps = np.diff([wavelength[i] for i in order])
        if np.all(steps > 0) or np.all(steps < 0):
            spectrum = load_one(path)
            np.testing.assert_array_equal(spectrum.wavelength, wavelength)
            np.testing.assert_array_equal(spectrum.flux, flux)
        else:
            with pytest.raises(SpectrumFormatError, match="not monotonic"):
                load_spectra(path)


@PROPERTY_SETTINGS
@given(wavelength=wavelength_grids, data=st.data())
def test_it_masks_every_non_finite_flux_and_keeps_the_length(wavelength, data) -> None:
    size = len(wavelength)
    flux = data.draw(st.lists(any_flux, min_size=size, max_size=size))
    assume(any(np.isfinite(flux)))
    with scratch_file("holes.csv") as path:
        spectrum = load_one(write_table_csv(path, wavelength, flux))
    assert len(spectrum) == size
    np.testing.assert_array_equal(spectrum.mask, ~np.isfinite(flux))
    np.testing.assert_array_equal(spectrum.flux, flux)  # NaN compares equal here


def load_or_format_error(content: bytes) -> list[Spectrum] | None:
    """Load bytes; a SpectrumFormatError is fine, any other exception fails the test."""
    with scratch_file("garbage") as path:
        path.write_bytes(content)
        try:
            return load_spectra(path)
        except SpectrumFormatError as error:
            assert str(path) in str(error)
            return None


def assert_valid(spectra: list[Spectrum]) -> None:
    for spectrum in spectra:
        assert len(spectrum) >= MIN_SPECTRUM_PIXELS
        assert np.all(np.diff(spectrum.wavelength) > 0)
        assert spectrum.mask.shape == spectrum.flux.shape


@PROPERTY_SETTINGS
@given(content=st.binary(max_size=2000))
def test_it_answers_random_bytes_with_a_format_error_or_a_valid_spectrum(content: bytes) -> None:
    spectra = load_or_format_error(content)
    if spectra is not None:
        assert_valid(spectra)


@PROPERTY_SETTINGS
@given(text=st.text(max_size=500))
def test_it_answers_random_text_with_a_format_error_or_a_valid_spectrum(text: str) -> None:
    spectra = load_or_format_error(text.encode("utf-8"))
    if spectra is not None:
        assert_valid(spectra)


@PROPERTY_SETTINGS
@given(
    magic=st.sampled_from([b"SIMPLE  =", b"\x1f\x8b", b"PAR1", b"PK\x03\x04"]),
    tail=st.binary(max_size=3000),
)
def test_it_refuses_garbage_behind_a_known_magic_number(magic: bytes, tail: bytes) -> None:
    assert load_or_format_error(magic + tail) is None


@PROPERTY_SETTINGS
@given(content=st.binary(max_size=2000))
def test_it_refuses_or_validates_gzipped_garbage(content: bytes) -> None:
    spectra = load_or_format_error(gzip.compress(content, mtime=0))
    if spectra is not None:
        assert_valid(spectra)


@pytest.fixture(scope="module")
def lamost_bytes(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    path = tmp_path_factory.mktemp("lamost") / "full.fits"
    write_lamost_new(path, n_pixels=400)
    return path.read_bytes()


@PROPERTY_SETTINGS
@given(fraction=st.floats(min_value=0.0, max_value=1.0, exclude_max=True))
def test_it_refuses_every_truncation_of_a_fits_file(lamost_bytes: bytes, fraction: float) -> None:
    assert load_or_format_error(lamost_bytes[: int(len(lamost_bytes) * fraction)]) is None


# --- corrupted survey files and edited tables: a format error or a valid spectrum ---------------


@pytest.fixture(scope="module")
def survey_bytes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    folder = tmp_path_factory.mktemp("surveys")
    write_lamost_new(folder / "lamost_new.fits", n_pixels=200)
    write_lamost_old(folder / "lamost_old.fits", n_pixels=200)
    write_sdss_spec(folder / "sdss.fits")
    write_desi_coadd(folder / "desi.fits", n_targets=2)
    write_new_layouts(folder)
    return {path.stem: path.read_bytes() for path in sorted(folder.iterdir())}


NEW_LAYOUTS = ["image_1d", "image_extensions", "table_one_row"]


def write_new_layouts(folder: Path) -> None:
    """One file of each layout issue 23 added: a 1-D WCS image, FLUX/ERROR/WAVELENGTH image
    extensions, and an ESO Phase 3 table of arrays in one row."""
    size = 200
    flux = np.linspace(1.0, 2.0, size)
    image = fits.PrimaryHDU(flux.astype(np.float32))
    image.header.update({"CRVAL1": 4000.0, "CDELT1": 2.0, "CRPIX1": 1.0, "DC-FLAG": 0})
    image.header.update({"BUNIT": "erg/cm2/s/A", "OBJECT": "HD 1", "AIRORVAC": "air"})
    image.writeto(folder / "image_1d.fits")
    fits.HDUList(
        [
            fits.PrimaryHDU(),
            fits.ImageHDU(flux, name="FLUX"),
            fits.ImageHDU(np.full(size, 0.1), name="ERROR"),
            fits.ImageHDU(np.geomspace(3800.0, 9000.0, size), name="WAVELENGTH"),
        ]
    ).writeto(folder / "image_extensions.fits")
    columns = {"WAVE": np.linspace(300.0, 900.0, size), "FLUX": flux, "ERR": flux / 10.0}
    table = fits.BinTableHDU.from_columns(
        [fits.Column(name=n, format=f"{size}D", array=v[None, :]) for n, v in columns.items()]
    )
    table.columns["WAVE"].unit = "nm"
    fits.HDUList([fits.PrimaryHDU(), table]).writeto(folder / "table_one_row.fits")


edits = st.lists(
    st.tuples(st.floats(min_value=0.0, max_value=1.0, exclude_max=True), st.integers(0, 255)),
    min_size=1,
    max_size=8,
)


def overwrite(raw: bytes, changes: list[tuple[float, int]]) -> bytes:
    corrupted = bytearray(raw)
    for where, value in changes:
        corrupted[int(where * len(corrupted))] = value
    return bytes(corrupted)


@PROPERTY_SETTINGS
@given(
    layout=st.sampled_from(["lamost_new", "lamost_old", "sdss", "desi", *NEW_LAYOUTS]),
    changes=edits,
)
def test_it_refuses_or_validates_every_corruption_of_a_survey_file(
    survey_bytes: dict[str, bytes], layout: str, changes: list[tuple[float, int]]
) -> None:
    spectra = load_or_format_error(overwrite(survey_bytes[layout], changes))
    if spectra is not None:
        assert_valid(spectra)


@PROPERTY_SETTINGS
@given(
    layout=st.sampled_from(["lamost_new", "sdss", *NEW_LAYOUTS]),
    fraction=st.floats(min_value=0.0, max_value=1.0, exclude_max=True),
)
def test_it_refuses_every_truncation_of_a_gzipped_file(
    survey_bytes: dict[str, bytes], layout: str, fraction: float
) -> None:
    packed = gzip.compress(survey_bytes[layout], mtime=0)
    assert load_or_format_error(packed[: int(len(packed) * fraction)]) is None


TABLE_ALPHABET = list("0123456789.,-+eE \t\n#:=[]abnNaIf\"'") + ["nan", "inf", "\x00", "é"]


@PROPERTY_SETTINGS
@given(
    table=tables(),
    changes=st.lists(
        st.tuples(
            st.sampled_from(["insert", "delete", "replace"]),
            st.floats(min_value=0.0, max_value=1.0, exclude_max=True),
            st.sampled_from(TABLE_ALPHABET),
        ),
        min_size=1,
        max_size=6,
    ),
)
def test_it_refuses_or_validates_every_edit_of_a_text_table(table, changes) -> None:
    wavelength, flux, error = table
    with scratch_file("table.csv") as path:
        text = write_table_csv(path, wavelength, flux, error).read_text()
    for action, where, token in changes:
        at = int(where * len(text))
        if action == "insert":
            text = text[:at] + token + text[at:]
        elif action == "delete":
            text = text[:at] + text[at + 1 :]
        else:
            text = text[:at] + token + text[at + 1 :]
    spectra = load_or_format_error(text.encode("utf-8"))
    if spectra is not None:
        assert_valid(spectra)


float32_flux = st.floats(allow_nan=False, allow_infinity=False, width=32)
float32_ivar = st.floats(min_value=2.0**-10, max_value=2.0**10, width=32)


@PROPERTY_SETTINGS
@given(data=st.data(), size=st.integers(min_value=MIN_SPECTRUM_PIXELS, max_value=80))
def test_it_round_trips_random_lamost_pixels(data, size: int) -> None:
    flux = np.array(data.draw(st.lists(float32_flux, min_size=size, max_size=size)))
    ivar = np.array(data.draw(st.lists(float32_ivar, min_size=size, max_size=size)))
    with scratch_file("lamost.fits") as path:
        written = write_lamost_new(path, n_pixels=size, columns={"FLUX": flux, "IVAR": ivar})
        spectrum = load_one(path)
    np.testing.assert_array_equal(spectrum.wavelength, written.wavelength)
    np.testing.assert_array_equal(spectrum.flux, written.flux)
    np.testing.assert_array_equal(spectrum.ivar, written.ivar)


@PROPERTY_SETTINGS
@given(n_wave=st.integers(2, 30), n_flux=st.integers(2, 30))
def test_it_names_both_lengths_when_npz_arrays_differ(n_wave: int, n_flux: int) -> None:
    assume(n_wave != n_flux)
    with scratch_file("t.npz") as path:
        write_table_npz(path, wavelength=4000.0 + np.arange(n_wave), flux=np.ones(n_flux))
        with pytest.raises(SpectrumFormatError) as raised:
            load_spectra(path)
    message = str(raised.value)
    assert "length mismatch" in message
    assert f"wavelength has {n_wave}" in message and f"flux has {n_flux}" in message
