"""The readers of issue 23: FITS images with a wavelength WCS, multi-extension images, FITS
tables (one row per pixel, one row of arrays), lenient headers, declared columns and frames,
and the refusal of what is not a spectrum."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from astropy.io import fits

from agent.spectra import (
    Declared,
    ReadLimits,
    SpectrumFormatError,
    SpectrumTooLarge,
    air_to_vacuum,
    load_spectra,
)
from agent.spectra.declared import DeclarationError, parse_columns, parse_frame

N = 200
PIXEL = np.arange(N, dtype=np.float64)
FLUX = 1.0 + 0.01 * PIXEL
SIGMA = np.full(N, 0.5)


def load_one(path: Path, **kwargs):
    spectra = load_spectra(path, **kwargs)
    assert len(spectra) == 1
    return spectra[0]


def refused(path: Path, *parts: str, **kwargs) -> str:
    with pytest.raises(SpectrumFormatError) as caught:
        load_spectra(path, **kwargs)
    message = str(caught.value)
    assert path.name in message
    for part in parts:
        assert part.lower() in message.lower(), message
    return message


def image_1d(path: Path, cards: dict, data: np.ndarray = FLUX) -> Path:
    hdu = fits.PrimaryHDU(np.asarray(data, dtype=np.float32))
    if "CRVAL1" in cards:
        hdu.header["CRPIX1"] = 1.0
    for key, value in cards.items():
        hdu.header[key] = value
    hdu.writeto(path)
    return path


# --- 1-D images ---------------------------------------------------------------------------------


@pytest.mark.parametrize("step_key", ["CDELT1", "CD1_1"])
def test_it_reads_a_1d_image_with_a_linear_wcs(tmp_path: Path, step_key: str) -> None:
    path = image_1d(
        tmp_path / "star.fits",
        {
            "CRVAL1": 4000.0,
            step_key: 2.0,
            "CRPIX1": 1.0,
            "CTYPE1": "LINEAR",
            "BUNIT": "erg/cm2/s/A",
        },
    )
    spectrum = load_one(path)
    np.testing.assert_array_equal(spectrum.wavelength, 4000.0 + 2.0 * PIXEL)
    np.testing.assert_allclose(spectrum.flux, FLUX.astype(np.float32))
    assert spectrum.meta["flux_unit"] == "erg/cm2/s/A"
    assert spectrum.meta["wavelength_frame_source"] == "assumed"
    assert spectrum.ivar is None


def test_it_counts_the_reference_pixel_from_one(tmp_path: Path) -> None:
    path = image_1d(tmp_path / "s.fits", {"CRVAL1": 5000.0, "CDELT1": 1.0, "CRPIX1": 11.0})
    assert load_one(path).wavelength[10] == 5000.0


def test_it_takes_a_missing_crpix1_as_zero_as_the_fits_standard_does(tmp_path: Path) -> None:
    hdu = fits.PrimaryHDU(FLUX.astype(np.float32))
    hdu.header.update({"CRVAL1": 4000.0, "CDELT1": 2.0})
    hdu.writeto(tmp_path / "s.fits")
    np.testing.assert_array_equal(load_one(tmp_path / "s.fits").wavelength, 4002.0 + 2.0 * PIXEL)


def test_it_reads_an_iraf_log10_grid_with_dc_flag(tmp_path: Path) -> None:
    path = image_1d(
        tmp_path / "s.fits", {"CRVAL1": 3.6, "CDELT1": 1e-4, "CRPIX1": 1.0, "DC-FLAG": 1}
    )
    np.testing.assert_allclose(load_one(path).wavelength, 10.0 ** (3.6 + 1e-4 * PIXEL), rtol=1e-12)


def test_it_reads_a_fits_wave_log_axis(tmp_path: Path) -> None:
    cards = {"CRVAL1": 4000.0, "CDELT1": 0.5, "CRPIX1": 1.0, "CTYPE1": "WAVE-LOG"}
    spectrum = load_one(image_1d(tmp_path / "s.fits", cards))
    np.testing.assert_allclose(spectrum.wavelength, 4000.0 * np.exp(0.5 * PIXEL / 4000.0))
    # 'WAVE' is vacuum by the standard, but is written over air wavelengths too: not a statement
    assert spectrum.meta["wavelength_frame_source"] == "assumed"


def test_it_reads_sdss_wave_log_over_log10_angstrom(tmp_path: Path) -> None:
    # MaNGA's MaStar templates: CTYPE1 = 'WAVE-LOG', CRVAL1 = 3.5601, CDELT1 = 1e-4
    cards = {"CRVAL1": 3.5601, "CDELT1": 1e-4, "CTYPE1": "WAVE-LOG"}
    spectrum = load_one(image_1d(tmp_path / "s.fits", cards))
    np.testing.assert_allclose(spectrum.wavelength, 10.0 ** (3.5601 + 1e-4 * PIXEL), rtol=1e-12)


def test_it_converts_a_nanometre_axis(tmp_path: Path) -> None:
    cards = {"CRVAL1": 400.0, "CDELT1": 0.2, "CUNIT1": "nm"}
    np.testing.assert_allclose(
        load_one(image_1d(tmp_path / "s.fits", cards)).wavelength, 4000.0 + 2.0 * PIXEL
    )


@pytest.mark.parametrize(
    ("cards", "basis"),
    [
        ({"AIRORVAC": "air"}, "AIRORVAC"),
        ({"VACUUM": False}, "VACUUM = F"),
        ({"CTYPE1": "AWAV"}, "AWAV"),
    ],
)
def test_it_reads_air_wavelengths_from_the_header_and_stores_vacuum(
    tmp_path: Path, cards: dict, basis: str
) -> None:
    path = image_1d(tmp_path / "s.fits", {"CRVAL1": 6000.0, "CDELT1": 1.0, **cards})
    spectrum = load_one(path)
    np.testing.assert_allclose(spectrum.wavelength, air_to_vacuum(6000.0 + PIXEL))
    assert spectrum.meta["wavelength_frame"] == "air"
    assert spectrum.meta["wavelength_frame_source"] == "file"
    assert basis in spectrum.meta["wavelength_frame_basis"]


def test_it_reads_an_old_sdss_1d_image_with_coeff0_coeff1(tmp_path: Path) -> None:
    cards = {"COEFF0": 3.5800, "COEFF1": 1e-4, "TELESCOP": "SDSS 2.5-M", "BUNIT": "1E-17 erg"}
    spectrum = load_one(image_1d(tmp_path / "spPlate-like.fits", cards))
    np.testing.assert_allclose(spectrum.wavelength, 10.0 ** (3.58 + 1e-4 * PIXEL), rtol=1e-12)
    assert spectrum.survey == "SDSS"


def test_it_reads_an_sdss_spspec_image(tmp_path: Path) -> None:
    rows = np.zeros((5, N), dtype=np.float32)
    rows[0], rows[2] = FLUX, SIGMA
    rows[3, 7] = 4.0  # a mask bit
    hdu = fits.PrimaryHDU(rows)
    hdu.header.update({"COEFF0": 3.58, "COEFF1": 1e-4, "TELESCOP": "SDSS 2.5-M"})
    hdu.writeto(tmp_path / "spSpec.fit")
    spectrum = load_one(tmp_path / "spSpec.fit")
    np.testing.assert_allclose(spectrum.flux, FLUX.astype(np.float32))
    np.testing.assert_allclose(spectrum.ivar, 4.0)
    assert np.flatnonzero(spectrum.mask).tolist() == [7]
    assert spectrum.meta["layout"] == "SDSS spSpec image"


def test_it_reads_an_iraf_band_cube_with_a_sigma_band(tmp_path: Path) -> None:
    cube = np.zeros((4, 1, N), dtype=np.float32)
    cube[0, 0], cube[3, 0] = FLUX, SIGMA
    hdu = fits.PrimaryHDU(cube)
    hdu.header.update({"CRVAL1": 4000.0, "CDELT1": 2.0, "BANDID1": "spectrum", "BANDID2": "raw"})
    hdu.header.update({"BANDID3": "background", "BANDID4": "sigma - clean"})
    hdu.writeto(tmp_path / "iraf.fits")
    spectrum = load_one(tmp_path / "iraf.fits")
    np.testing.assert_allclose(spectrum.flux, FLUX.astype(np.float32))
    np.testing.assert_allclose(spectrum.ivar, 4.0)


def test_it_refuses_a_1d_image_without_a_wavelength_solution(tmp_path: Path) -> None:
    refused(image_1d(tmp_path / "s.fits", {}), "without a wavelength solution", "CRVAL1")


def test_it_names_a_log10_grid_the_header_does_not_declare(tmp_path: Path) -> None:
    path = image_1d(tmp_path / "s.fits", {"CRVAL1": 3.5682, "CDELT1": 1e-4})
    refused(path, "look like log10", "DC-FLAG = 1")


def test_it_refuses_several_apertures(tmp_path: Path) -> None:
    fits.PrimaryHDU(np.ones((2, 1, N), dtype=np.float32)).writeto(tmp_path / "m.fits")
    refused(tmp_path / "m.fits", "shape (2, 1, 200)", "not one spectrum")


# --- multi-extension images ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "values", "ivar"),
    [("ERROR", SIGMA, 4.0), ("IVAR", np.full(N, 3.0), 3.0), ("VARIANCE", np.full(N, 0.25), 4.0)],
)
def test_it_reads_flux_error_and_wavelength_extensions(
    tmp_path: Path, name: str, values: np.ndarray, ivar: float
) -> None:
    wave = np.geomspace(3800.0, 9000.0, N)
    hdus = fits.HDUList(
        [
            fits.PrimaryHDU(),
            fits.ImageHDU(FLUX, name="FLUX"),
            fits.ImageHDU(values, name=name),
            fits.ImageHDU(wave, name="WAVELENGTH"),
        ]
    )
    hdus.writeto(tmp_path / "mef.fits")
    spectrum = load_one(tmp_path / "mef.fits")
    np.testing.assert_array_equal(spectrum.wavelength, wave)
    np.testing.assert_array_equal(spectrum.flux, FLUX)
    np.testing.assert_allclose(spectrum.ivar, ivar)


def test_it_refuses_an_empty_flux_extension_naming_the_layout(tmp_path: Path) -> None:
    fits.HDUList([fits.PrimaryHDU(), fits.ImageHDU(name="FLUX")]).writeto(tmp_path / "e.fits")
    refused(tmp_path / "e.fits", "FITS layout not recognised", "HDUs: PRIMARY, FLUX")


def test_it_leaves_out_an_empty_error_extension(tmp_path: Path) -> None:
    # MaNGA's MILESHC_51.fits: an IVAR extension without data
    hdu = fits.PrimaryHDU(FLUX)
    hdu.header.update({"CRVAL1": 3540.5, "CDELT1": 0.9, "CRPIX1": 1.0})
    fits.HDUList([hdu, fits.ImageHDU(name="IVAR")]).writeto(tmp_path / "hc.fits")
    spectrum = load_one(tmp_path / "hc.fits")
    assert spectrum.ivar is None
    np.testing.assert_allclose(spectrum.wavelength, 3540.5 + 0.9 * PIXEL)


def test_it_refuses_extensions_of_different_lengths(tmp_path: Path) -> None:
    fits.HDUList(
        [
            fits.PrimaryHDU(),
            fits.ImageHDU(FLUX, name="FLUX"),
            fits.ImageHDU(PIXEL[:-1] + 4000, name="WAVELENGTH"),
        ]
    ).writeto(tmp_path / "mef.fits")
    refused(tmp_path / "mef.fits", "length mismatch", "HDU WAVELENGTH has 199")


# --- tables -------------------------------------------------------------------------------------


def test_it_reads_a_table_behind_an_empty_primary_one_row_per_pixel(tmp_path: Path) -> None:
    wave = 3000.0 + 5.0 * PIXEL
    table = fits.BinTableHDU.from_columns(
        [
            fits.Column(name="WAVELENGTH", format="D", unit="ANGSTROMS", array=wave),
            fits.Column(name="FLUX", format="E", unit="FLAM", array=FLUX),
            fits.Column(name="STATERROR", format="E", array=SIGMA),
            fits.Column(name="FWHM", format="E", array=np.full(N, 5.0)),
        ]
    )
    fits.HDUList([fits.PrimaryHDU(), table]).writeto(tmp_path / "calspec.fits")
    spectrum = load_one(tmp_path / "calspec.fits")
    np.testing.assert_array_equal(spectrum.wavelength, wave)
    np.testing.assert_allclose(spectrum.ivar, 4.0)
    assert spectrum.meta["flux_unit"] == "FLAM"
    assert spectrum.meta["ignored_columns"] == ["FWHM"]


@pytest.mark.parametrize("blank", [np.nan, 0.0])
def test_it_reads_a_mostly_blank_error_column_as_unknown_not_as_bad_pixels(
    tmp_path: Path, blank: float
) -> None:
    # CALSPEC leaves STATERROR blank over its Oke and Hayes parts (p041c_001: all of it); read as
    # bad pixels, a solar analogue had 0 good pixels and Vega none in the optical
    sigma = np.where(PIXEL < 150, blank, 0.5)
    table = fits.BinTableHDU.from_columns(
        [
            fits.Column(name="WAVELENGTH", format="D", array=3000.0 + 5.0 * PIXEL),
            fits.Column(name="FLUX", format="E", array=FLUX),
            fits.Column(name="STATERROR", format="E", array=sigma),
        ]
    )
    fits.HDUList([fits.PrimaryHDU(), table]).writeto(tmp_path / "oke.fits")
    spectrum = load_one(tmp_path / "oke.fits")
    assert spectrum.ivar is None
    assert "150 of 200 pixels" in spectrum.meta["uncertainty_left_out"]


def test_it_still_masks_the_few_pixels_a_table_gives_no_error_for(tmp_path: Path) -> None:
    sigma = np.where(PIXEL < 10, np.nan, 0.5)
    table = fits.BinTableHDU.from_columns(
        [
            fits.Column(name="WAVELENGTH", format="D", array=3000.0 + 5.0 * PIXEL),
            fits.Column(name="FLUX", format="E", array=FLUX),
            fits.Column(name="STATERROR", format="E", array=sigma),
        ]
    )
    fits.HDUList([fits.PrimaryHDU(), table]).writeto(tmp_path / "stis.fits")
    spectrum = load_one(tmp_path / "stis.fits")
    assert spectrum.ivar is not None
    np.testing.assert_allclose(spectrum.ivar[10:], 4.0)
    assert not np.any(spectrum.ivar[:10])
    assert "uncertainty_left_out" not in spectrum.meta


def test_it_reads_calspecs_declared_null_value_in_a_float_column_as_missing(
    tmp_path: Path,
) -> None:
    """CALSPEC writes TNULLn = 1.6e38 on its float columns and that value where STATERROR is
    unknown (p177d_stis_001 below 5300 Å); astropy ignores TNULLn on floats, so it was read as
    an error of 1.6e38, every line there looked insignificant and a G0V star passed for a
    featureless white dwarf."""
    sigma = np.where(PIXEL < 100, np.float32(1.6e38), 0.5)
    table = fits.BinTableHDU.from_columns(
        [
            fits.Column(name="WAVELENGTH", format="D", array=3000.0 + 5.0 * PIXEL),
            fits.Column(name="FLUX", format="E", array=FLUX),
            fits.Column(name="STATERROR", format="E", array=sigma),
        ]
    )
    table.header["TNULL3"] = 1.6e38
    fits.HDUList([fits.PrimaryHDU(), table]).writeto(tmp_path / "calspec_null.fits")
    spectrum = load_one(tmp_path / "calspec_null.fits")
    assert spectrum.ivar is None  # half the errors unknown: the column is not used
    assert "100 of 200 pixels" in spectrum.meta["uncertainty_left_out"]
    np.testing.assert_allclose(spectrum.flux, FLUX.astype(np.float32))


def eso_phase3(path: Path, **extra_columns: np.ndarray) -> Path:
    wave_nm = 300.0 + 0.5 * PIXEL
    arrays = {"WAVE": wave_nm, "FLUX": FLUX, "ERR": SIGMA, "QUAL": np.zeros(N), **extra_columns}
    arrays["QUAL"][3] = 1
    units = {"WAVE": "nm", "FLUX": "erg cm**(-2) s**(-1) angstrom**(-1)"}
    table = fits.BinTableHDU.from_columns(
        [
            fits.Column(name=name, format=f"{N}D", unit=units.get(name), array=values[None, :])
            for name, values in arrays.items()
        ]
    )
    primary = fits.PrimaryHDU()
    primary.header.update({"INSTRUME": "XSHOOTER", "OBJECT": "HD 49798", "SPEC_RES": 5400.0})
    fits.HDUList([primary, table]).writeto(path)
    return path


def test_it_reads_an_eso_phase3_table_of_arrays_in_one_row(tmp_path: Path) -> None:
    spectrum = load_one(eso_phase3(tmp_path / "ADP.fits", FLUX_REDUCED=FLUX * 7.0))
    np.testing.assert_allclose(spectrum.wavelength, 3000.0 + 5.0 * PIXEL)
    np.testing.assert_array_equal(spectrum.flux, FLUX)  # not FLUX_REDUCED
    np.testing.assert_allclose(spectrum.ivar, 4.0)
    assert np.flatnonzero(spectrum.mask).tolist() == [3]
    assert (spectrum.object_id, spectrum.survey) == ("HD 49798", "XSHOOTER")
    assert spectrum.resolution.resolving_power_at(6000.0) == pytest.approx(5400.0)
    assert spectrum.meta["ignored_columns"] == ["FLUX_REDUCED"]


def test_it_refuses_two_uncertainty_columns_rather_than_pick_one(tmp_path: Path) -> None:
    refused(
        eso_phase3(tmp_path / "ADP.fits", SIGMA=SIGMA * 2), "more than one column", "ERR, SIGMA"
    )


def test_it_reads_air_from_a_column_name(tmp_path: Path) -> None:
    table = fits.BinTableHDU.from_columns(
        [
            fits.Column(name="WAVE_AIR", format="D", array=6000.0 + PIXEL),
            fits.Column(name="FLUX", format="D", array=FLUX),
        ]
    )
    fits.HDUList([fits.PrimaryHDU(), table]).writeto(tmp_path / "t.fits")
    spectrum = load_one(tmp_path / "t.fits")
    np.testing.assert_allclose(spectrum.wavelength, air_to_vacuum(6000.0 + PIXEL))
    assert spectrum.meta["wavelength_frame_basis"] == "column name 'WAVE_AIR'"


# --- lenient headers, real corruption ------------------------------------------------------------


def with_card(raw: bytes, keyword: bytes, card: bytes) -> bytes:
    start = raw.index(keyword.ljust(8))
    return raw[:start] + card.ljust(80) + raw[start + 80 :]


def image_bytes(**cards) -> bytes:
    hdu = fits.PrimaryHDU(FLUX.astype(np.float32))
    hdu.header.update({"CRVAL1": 4000.0, "CDELT1": 2.0, "CRPIX1": 1.0, **cards})
    buffer = io.BytesIO()
    hdu.writeto(buffer)
    return buffer.getvalue()


def test_it_reads_a_file_with_an_unparsable_card(tmp_path: Path) -> None:
    # main refused 255 such files: "truncated or corrupt FITS file (VerifyError: Unparsable card"
    raw = with_card(image_bytes(OBSERVER="x"), b"OBSERVER", b"OBSERVER= O'Brien & co, no quotes")
    (tmp_path / "lenient.fits").write_bytes(raw)
    spectrum = load_one(tmp_path / "lenient.fits")
    np.testing.assert_array_equal(spectrum.wavelength, 4000.0 + 2.0 * PIXEL)
    assert spectrum.meta["header_cards_repaired"] == ["HDU 0 OBSERVER"]


@pytest.mark.parametrize(
    ("keyword", "card"), [(b"BITPIX", b"BITPIX  = -32x"), (b"NAXIS1", b"NAXIS1  = 2 00")]
)
def test_it_still_refuses_a_damaged_structure_card(
    tmp_path: Path, keyword: bytes, card: bytes
) -> None:
    (tmp_path / "bad.fits").write_bytes(with_card(image_bytes(), keyword, card))
    refused(tmp_path / "bad.fits", "corrupt FITS")


def test_it_still_refuses_truncated_data(tmp_path: Path) -> None:
    (tmp_path / "cut.fits").write_bytes(image_bytes()[:3000])
    refused(tmp_path / "cut.fits", "truncated")


def test_it_says_where_a_truncated_data_unit_ends_without_pythons_words(tmp_path: Path) -> None:
    # Issue 37: a FITS cut inside its data unit read "(TypeError: buffer is too small for
    # requested array)".
    raw = image_bytes()
    (tmp_path / "cut.fits").write_bytes(raw[: 2880 + 100])
    message = refused(
        tmp_path / "cut.fits", "truncated FITS file", "HDU 0", "but the file ends at byte 2,980"
    )
    assert "Error" not in message and "buffer" not in message, message


def test_it_says_a_file_ends_inside_a_header(tmp_path: Path) -> None:
    (tmp_path / "head.fits").write_bytes(image_bytes()[:1000])
    message = refused(tmp_path / "head.fits", "truncated FITS file", "inside a header")
    assert "Error" not in message, message


# --- what is not a spectrum ----------------------------------------------------------------------


def test_it_refuses_a_ten_pixel_lamost_file(tmp_path: Path) -> None:
    # main accepted a 10-pixel "LAMOST spectrum" at 3045 Angstrom
    hdu = fits.PrimaryHDU(np.ones((5, 10), dtype=np.float32))
    hdu.data[2] = 3045.0 + np.arange(10)
    hdu.header["TELESCOP"] = "LAMOST"
    hdu.writeto(tmp_path / "lamost10.fits")
    refused(tmp_path / "lamost10.fits", "not a spectrum", "10 pixels", "at least 50")


def test_it_refuses_a_file_of_ra_dec_pairs(tmp_path: Path) -> None:
    # main read this as a 5-pixel spectrum
    path = tmp_path / "targets.txt"
    path.write_text("10.68 41.27\n83.82 -5.39\n201.37 -43.02\n266.42 -29.01\n350.85 58.81\n")
    refused(path, "not a spectrum")


def test_it_refuses_a_grid_outside_the_optical_and_infrared(tmp_path: Path) -> None:
    path = tmp_path / "nm.csv"
    path.write_text("wavelength,flux\n" + "".join(f"{400 + i},1\n" for i in range(100)))
    refused(path, "400-499 Angstrom", "0 pixels within 1,000-30,000", "another unit")


def test_it_refuses_a_grid_that_is_not_monotonic(tmp_path: Path) -> None:
    wave = np.r_[4000.0 + PIXEL[:100], 4050.5 + PIXEL[:100]]  # two overlapping orders
    path = tmp_path / "orders.csv"
    path.write_text("wavelength,flux\n" + "".join(f"{w},1\n" for w in wave))
    refused(path, "not monotonic", "rises to 4099 at pixel 99, then falls to 4050.5 at pixel 100")


# --- text tables: declared columns and frames ----------------------------------------------------


def three_columns(path: Path, header: str | None = None) -> Path:
    lines = [header] if header else []
    lines += [f"{4000 + 2 * i},{1 + i / 100},{3.3e-9 * (1 + i / 100)}" for i in range(N)]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_it_ignores_a_named_third_column_that_is_no_uncertainty(tmp_path: Path) -> None:
    spectrum = load_one(three_columns(tmp_path / "t.csv", "wavelength,flux,flux_fnu"))
    assert spectrum.ivar is None
    assert spectrum.meta["ignored_columns"] == ["flux_fnu"]


def test_it_refuses_an_error_column_in_another_unit_than_the_flux(tmp_path: Path) -> None:
    path = three_columns(tmp_path / "t.csv", "wavelength,flux[erg/s/cm2/A],error[erg/s/cm2/Hz]")
    refused(path, "not read as the flux's uncertainty", "columns")


def test_it_reads_declared_columns(tmp_path: Path) -> None:
    path = three_columns(tmp_path / "t.csv")
    spectrum = load_one(path, declared=Declared(columns=("wavelength", "flux", "ignore")))
    assert spectrum.ivar is None
    np.testing.assert_allclose(spectrum.flux, 1 + PIXEL / 100)
    as_error = load_one(path, declared=Declared(columns=("wavelength", "flux", "error")))
    np.testing.assert_allclose(as_error.ivar, 1.0 / (3.3e-9 * (1 + PIXEL / 100)) ** 2)


def test_it_skips_the_header_line_under_declared_columns_with_a_unit(tmp_path: Path) -> None:
    path = tmp_path / "t.txt"
    path.write_text("lam f\n" + "".join(f"{400 + i / 5} 1\n" for i in range(N)))
    spectrum = load_one(path, declared=Declared(columns=("wavelength[nm]", "flux")))
    np.testing.assert_allclose(spectrum.wavelength, 4000.0 + 2.0 * PIXEL)


def test_it_refuses_declared_columns_of_another_width(tmp_path: Path) -> None:
    path = three_columns(tmp_path / "t.csv")
    refused(path, "2 columns declared", "has 3", declared=Declared(columns=("wavelength", "flux")))


def test_it_applies_a_declared_air_frame_to_an_assumed_one(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("wavelength,flux\n" + "".join(f"{6000 + i},1\n" for i in range(N)))
    spectrum = load_one(path, declared=Declared(frame="air"))
    np.testing.assert_allclose(spectrum.wavelength, air_to_vacuum(6000.0 + PIXEL))
    assert spectrum.meta["wavelength_frame_source"] == "declared"


def test_it_refuses_a_declared_frame_the_file_contradicts(tmp_path: Path) -> None:
    path = image_1d(tmp_path / "s.fits", {"CRVAL1": 6000.0, "CDELT1": 1.0, "AIRORVAC": "air"})
    refused(path, "declared vacuum", "file says air", "AIRORVAC", declared=Declared(frame="vacuum"))


def test_it_parses_declarations_and_says_what_is_accepted() -> None:
    assert parse_columns(" Wavelength[nm], flux , ignore") == ("wavelength[nm]", "flux", "ignore")
    assert parse_columns("  ") is None
    assert parse_frame("VAC") == "vacuum"
    with pytest.raises(DeclarationError, match="'sky' is not one of wavelength, flux"):
        parse_columns("wavelength,flux,sky")
    with pytest.raises(DeclarationError, match="exactly one 'flux'"):
        parse_columns("wavelength,flux,flux")
    with pytest.raises(DeclarationError, match="neither 'air' nor 'vacuum'"):
        parse_frame("water")


def test_it_keeps_header_coordinates_as_written_not_as_degrees(tmp_path: Path) -> None:
    # STELIB writes RA in radians ("RA = 6.0972 / Mean RA 23 17 22.7"); others hours or degrees
    path = image_1d(
        tmp_path / "s.fits", {"CRVAL1": 3200.0, "CDELT1": 1.0, "RA": 6.0972, "DEC": -0.0795}
    )
    spectrum = load_one(path)
    assert (spectrum.ra, spectrum.dec) == (None, None)
    assert (spectrum.meta["RA"], spectrum.meta["DEC"]) == (6.0972, -0.0795)


# --- the limits hold for the new layouts ---------------------------------------------------------


def test_it_refuses_a_1d_image_over_the_pixel_limit_before_converting_it(tmp_path: Path) -> None:
    path = image_1d(tmp_path / "big.fits", {"CRVAL1": 3000.0, "CDELT1": 0.01}, np.ones(5000))
    with pytest.raises(SpectrumTooLarge, match=r"5000 pixels in one spectrum; the limit is 1000"):
        load_spectra(path, limits=ReadLimits(max_pixels=1000))


def test_it_refuses_a_table_of_arrays_over_the_pixel_limit(tmp_path: Path) -> None:
    with pytest.raises(SpectrumTooLarge, match=r"200 pixels in one spectrum.*SPECTRUM_MAX_PIXELS"):
        load_spectra(eso_phase3(tmp_path / "ADP.fits"), limits=ReadLimits(max_pixels=100))
