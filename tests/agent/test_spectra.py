"""Readers, validation, writers and air/vacuum conversion of agent/spectra/."""

from __future__ import annotations

import gzip
import io
from pathlib import Path

import numpy as np
import pytest
from astropy.io import fits

from agent.spectra import (
    ArmPixels,
    Spectrum,
    SpectrumFormatError,
    air_to_vacuum,
    load_spectra,
    merge_arms,
    save_lamost_fits,
    spectrum_from_npz_bytes,
    spectrum_to_npz_bytes,
    vacuum_to_air,
    validate_arrays,
)
from tests.agent.survey_fixtures import (
    DESI_UNIQUE_PIXELS,
    DesiArm,
    specvi_row,
    write_desi_coadd,
    write_lamost_new,
    write_lamost_old,
    write_sdss_spec,
    write_specvi_parquet,
    write_table_ascii,
    write_table_csv,
    write_table_npz,
)

GRID = np.linspace(4000.0, 5000.0, 60)
BALMER = [4861.33, *np.linspace(4900.0, 6500.0, 58), 6562.80]  # air wavelengths at both ends

REAL_FILES = {
    "spec-55859-F5902_sp01-001_dr7.fits.gz": {"SUBCLASS": "G7", "OBSID": "101001", "SNRR": 27.16},
    "spec-55859-F5902_sp01-013_dr8.fits.gz": {"SUBCLASS": "A2", "OBSID": "101013", "SNRR": 8.79},
}


def load_one(path: Path) -> Spectrum:
    spectra = load_spectra(path)
    assert len(spectra) == 1
    return spectra[0]


def assert_format_error(path: Path, *reason: str) -> str:
    with pytest.raises(SpectrumFormatError) as caught:
        load_spectra(path)
    message = str(caught.value)
    assert path.name in message
    for part in reason:
        assert part.lower() in message.lower(), message
    return message


# --- real LAMOST files --------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(REAL_FILES))
def test_it_reads_the_real_lamost_grid(shared_lamost_dir: Path, name: str) -> None:
    spectrum = load_one(shared_lamost_dir / name)
    assert len(spectrum) == 3908
    assert spectrum.wavelength[0] == pytest.approx(3699.99, abs=0.01)
    assert spectrum.wavelength[-1] == pytest.approx(9097.0, abs=0.1)
    assert np.all(np.diff(spectrum.wavelength) > 0)


@pytest.mark.parametrize("name", sorted(REAL_FILES))
def test_it_reads_the_real_lamost_metadata(shared_lamost_dir: Path, name: str) -> None:
    expected = REAL_FILES[name]
    spectrum = load_one(shared_lamost_dir / name)
    assert spectrum.survey == "LAMOST"
    assert spectrum.meta["SUBCLASS"] == expected["SUBCLASS"]
    assert spectrum.meta["CLASS"] == "STAR"
    assert spectrum.object_id == expected["OBSID"]
    assert spectrum.snr == pytest.approx(expected["SNRR"])
    assert spectrum.ra == pytest.approx(332.2, abs=0.2)
    assert spectrum.source == str(shared_lamost_dir / name)


@pytest.mark.parametrize("name", sorted(REAL_FILES))
def test_it_reads_real_lamost_flux_without_nan_and_with_sensible_masks(
    shared_lamost_dir: Path, name: str
) -> None:
    spectrum = load_one(shared_lamost_dir / name)
    assert np.all(np.isfinite(spectrum.flux))
    assert spectrum.ivar is not None
    assert spectrum.mask is not None and spectrum.mask.dtype == bool
    np.testing.assert_array_equal(spectrum.mask[spectrum.ivar <= 0], True)
    assert spectrum.mask.mean() < 0.05


def test_it_reads_both_real_layouts_onto_the_same_plate_grid(shared_lamost_dir: Path) -> None:
    old, new = (load_one(shared_lamost_dir / name) for name in sorted(REAL_FILES))
    np.testing.assert_array_equal(old.wavelength, new.wavelength)


# --- LAMOST fixtures ----------------------------------------------------------------------------


def test_it_rebuilds_the_pilot_survey_grid_from_coeff0_coeff1(tmp_path: Path) -> None:
    continuum_subtracted = np.linspace(-1.0, 1.0, 100)
    path = tmp_path / "pilot.fits"
    write_lamost_old(path, n_pixels=100, wavelength_row=continuum_subtracted)
    spectrum = load_one(path)
    # 10**3.5682 = 3699.986 A; 10**(3.5682 + 99e-4) = 3699.986 * 1.023057 = 3785.30 A
    assert spectrum.wavelength[0] == pytest.approx(3699.986, abs=1e-3)
    assert spectrum.wavelength[-1] == pytest.approx(3785.30, abs=1e-2)
    assert spectrum.meta["wavelength_from_header"] is True


@pytest.mark.parametrize("layout", ["old", "new"])
def test_it_masks_lamost_andmask_zero_ivar_and_nan_flux_but_keeps_the_pixels(
    tmp_path: Path, layout: str
) -> None:
    flux = np.full(50, 10.0)
    flux[3] = np.nan
    ivar = np.full(50, 1.0)
    ivar[7] = 0.0
    and_mask = np.zeros(50)
    and_mask[11] = 8.0  # one bit set
    path = tmp_path / f"{layout}.fits"
    if layout == "old":
        write_lamost_old(path, n_pixels=50, flux=flux, ivar=ivar, and_mask=and_mask)
    else:
        write_lamost_new(
            path, n_pixels=50, columns={"FLUX": flux, "IVAR": ivar, "ANDMASK": and_mask}
        )
    spectrum = load_one(path)
    assert len(spectrum) == 50
    assert np.flatnonzero(spectrum.mask).tolist() == [3, 7, 11]
    assert np.isnan(spectrum.flux[3])


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ({"Z": -9999.0}, 0.0),
        ({"Z": 0.25}, 0.25),
        ({"Z": "nan"}, 0.0),
    ],
)
def test_it_reads_the_lamost_redshift_with_sentinels_as_zero(
    tmp_path: Path, header: dict, expected: float
) -> None:
    path = tmp_path / "z.fits"
    write_lamost_new(path, n_pixels=60, header=header)
    assert load_one(path).redshift == expected


def test_it_takes_snrg_when_snrr_is_absent(tmp_path: Path) -> None:
    path = tmp_path / "snr.fits"
    write_lamost_old(path, n_pixels=60, drop_keys=("SNRR",))
    assert load_one(path).snr == pytest.approx(12.22)


def test_it_estimates_snr_from_flux_and_ivar_without_snr_keys(tmp_path: Path) -> None:
    path = tmp_path / "snr.fits"
    # flux 4 with ivar 0.25 (sigma 2) is S/N 2 everywhere
    write_lamost_old(
        path, n_pixels=60, flux=np.full(60, 4.0), ivar=np.full(60, 0.25), drop_keys=("SNRR", "SNRG")
    )
    assert load_one(path).snr == pytest.approx(2.0)


def test_it_uses_desig_as_lamost_object_id_without_obsid(tmp_path: Path) -> None:
    path = tmp_path / "desig.fits"
    write_lamost_old(path, n_pixels=60, drop_keys=("OBSID",))
    assert load_one(path).object_id == "LAMOST J220848.54-020324.3"


# --- save_lamost_fits ---------------------------------------------------------------------------


def sample_spectrum(size: int = 64, **fields: object) -> Spectrum:
    wavelength = np.linspace(4000.0, 7000.0, size)
    flux = 1.0 + 0.1 * np.sin(wavelength / 50.0)
    ivar = np.full(size, 25.0)
    ivar[5] = 0.0
    defaults: dict[str, object] = {
        "redshift": 0.01,
        "survey": "LAMOST",
        "object_id": "987654",
        "ra": 10.5,
        "dec": -3.25,
        "snr": 17.5,
        "meta": {"CLASS": "STAR", "SUBCLASS": "M3"},
    }
    defaults.update(fields)
    return Spectrum(wavelength, flux, ivar, **defaults)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["synthetic.fits", "synthetic.fits.gz"])
def test_it_round_trips_save_lamost_fits_through_load_spectra(tmp_path: Path, name: str) -> None:
    original = sample_spectrum()
    save_lamost_fits(original, tmp_path / name)
    loaded = load_one(tmp_path / name)
    np.testing.assert_allclose(loaded.wavelength, original.wavelength, rtol=1e-7)
    np.testing.assert_allclose(loaded.flux, original.flux, rtol=1e-7)
    np.testing.assert_allclose(loaded.ivar, original.ivar, rtol=1e-7)
    np.testing.assert_array_equal(loaded.mask, original.ivar <= 0)
    assert (loaded.object_id, loaded.survey, loaded.meta["SUBCLASS"]) == ("987654", "LAMOST", "M3")
    assert (loaded.redshift, loaded.ra, loaded.dec, loaded.snr) == (0.01, 10.5, -3.25, 17.5)


def test_it_writes_gzip_when_the_name_ends_in_gz(tmp_path: Path) -> None:
    path = tmp_path / "spectrum.fits.gz"
    save_lamost_fits(sample_spectrum(), path)
    assert path.read_bytes()[:2] == b"\x1f\x8b"
    assert gzip.decompress(path.read_bytes())[:9] == b"SIMPLE  ="


def test_it_writes_the_lamost_new_layout_keys(tmp_path: Path) -> None:
    path = tmp_path / "spectrum.fits"
    save_lamost_fits(sample_spectrum(), path)
    with fits.open(path) as hdus:
        header = hdus[0].header
        assert hdus[0].data is None
        assert (header["TELESCOP"], header["NORM"], header["N_EXTEN"], header["VACUUM"]) == (
            "LAMOST",
            0,
            2,
            True,
        )
        assert hdus[1].name == "COADD" and len(hdus[1].data) == 1
        assert hdus[1].columns.names == [
            "FLUX",
            "IVAR",
            "WAVELENGTH",
            "ANDMASK",
            "ORMASK",
            "NORMALIZATION",
        ]
        assert all(column.format == "64E" for column in hdus[1].columns)
        assert not any(key.startswith("DATE") for key in header)


@pytest.mark.parametrize("name", ["a.fits", "a.fits.gz"])
def test_it_writes_identical_bytes_for_identical_input(tmp_path: Path, name: str) -> None:
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    save_lamost_fits(sample_spectrum(), tmp_path / "one" / name)
    save_lamost_fits(sample_spectrum(), tmp_path / "two" / name)
    assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "two" / name).read_bytes()


def test_it_puts_header_entries_in_the_primary_header(tmp_path: Path) -> None:
    path = tmp_path / "spectrum.fits"
    save_lamost_fits(sample_spectrum(), path, header={"SUBCLASS": "C", "TASK": "CS", "SEED": 7})
    with fits.open(path) as hdus:
        assert (hdus[0].header["SUBCLASS"], hdus[0].header["TASK"], hdus[0].header["SEED"]) == (
            "C",
            "CS",
            7,
        )


@pytest.mark.parametrize("key", ["lower", "TOOLONGKEY", "HAS SPACE"])
def test_it_refuses_header_keys_that_are_not_fits_keywords(tmp_path: Path, key: str) -> None:
    with pytest.raises(SpectrumFormatError, match="header key"):
        save_lamost_fits(sample_spectrum(), tmp_path / "x.fits", header={key: 1})


def test_it_uses_desig_for_a_non_numeric_object_id(tmp_path: Path) -> None:
    path = tmp_path / "named.fits"
    save_lamost_fits(sample_spectrum(object_id="synth-cv-0001"), path)
    assert load_one(path).object_id == "synth-cv-0001"


def test_it_round_trips_a_spectrum_without_ivar(tmp_path: Path) -> None:
    original = Spectrum(np.linspace(4000.0, 5000.0, 60), np.arange(60.0))
    save_lamost_fits(original, tmp_path / "noivar.fits")
    loaded = load_one(tmp_path / "noivar.fits")
    assert loaded.ivar is None
    np.testing.assert_array_equal(loaded.flux, original.flux)


def test_it_keeps_masked_pixels_masked_through_save(tmp_path: Path) -> None:
    original = sample_spectrum(size=60)
    original.mask[2] = True  # e.g. a survey mask bit, ivar still positive
    save_lamost_fits(original, tmp_path / "masked.fits")
    assert np.flatnonzero(load_one(tmp_path / "masked.fits").mask).tolist() == [2, 5]


# --- SDSS ---------------------------------------------------------------------------------------


def test_it_reads_sdss_pixels_from_loglam(tmp_path: Path) -> None:
    path = tmp_path / "spec-0266-51602-0001.fits"
    written = write_sdss_spec(path)
    spectrum = load_one(path)
    np.testing.assert_allclose(spectrum.wavelength, written.wavelength, rtol=1e-12)
    np.testing.assert_array_equal(spectrum.flux, written.flux)
    assert spectrum.wavelength[0] == pytest.approx(10**3.5798, rel=1e-6)  # 3800.14 A
    assert spectrum.survey == "SDSS"


@pytest.mark.parametrize("hdu_name", ["SPECOBJ", "SPALL"])
def test_it_reads_sdss_metadata_from_specobj_or_spall(tmp_path: Path, hdu_name: str) -> None:
    path = tmp_path / "spec.fits"
    write_sdss_spec(
        path, specobj_hdu=hdu_name, redshift=0.1, object_class="QSO", subclass="BROADLINE"
    )
    spectrum = load_one(path)
    assert spectrum.redshift == pytest.approx(0.1)
    assert (spectrum.meta["CLASS"], spectrum.meta["SUBCLASS"]) == ("QSO", "BROADLINE")
    assert spectrum.object_id == "0266-51602-0001"
    assert spectrum.snr == 12.5
    assert (spectrum.ra, spectrum.dec) == (146.71421, -1.0413043)


def test_it_prefers_specobjid_as_sdss_object_id(tmp_path: Path) -> None:
    path = tmp_path / "spec.fits"
    write_sdss_spec(path, specobj_id="299489677444933632")
    assert load_one(path).object_id == "299489677444933632"


def test_it_loads_sdss_without_specobj_with_zero_redshift(tmp_path: Path) -> None:
    path = tmp_path / "spec.fits"
    write_sdss_spec(path, specobj_hdu=None, plate=7, mjd=52000, fiber=12)
    spectrum = load_one(path)
    assert spectrum.redshift == 0.0
    assert spectrum.object_id == "0007-52000-0012"
    assert "CLASS" not in spectrum.meta


def test_it_masks_sdss_and_mask_bits(tmp_path: Path) -> None:
    and_mask = np.zeros(300, dtype=np.int32)
    and_mask[[10, 20]] = 1 << 23  # BRIGHTSKY
    path = tmp_path / "spec.fits"
    write_sdss_spec(path, and_mask=and_mask)
    assert np.flatnonzero(load_one(path).mask).tolist() == [10, 20]


# --- DESI ---------------------------------------------------------------------------------------


def test_it_returns_one_desi_spectrum_per_fibermap_row(tmp_path: Path) -> None:
    path = tmp_path / "coadd-main-dark-9557.fits"
    write_desi_coadd(path, n_targets=3)
    spectra = load_spectra(path)
    assert [s.object_id for s in spectra] == [
        "39627000000000000",
        "39627000000000001",
        "39627000000000002",
    ]
    assert [s.source for s in spectra] == [f"{path}#row{i}" for i in range(3)]
    assert {s.survey for s in spectra} == {"DESI"}
    assert {s.redshift for s in spectra} == {0.0}


def test_it_merges_the_real_desi_arm_grids_to_7781_increasing_pixels(tmp_path: Path) -> None:
    path = tmp_path / "coadd.fits"
    write_desi_coadd(path, n_targets=1)
    spectrum = load_one(path)
    assert len(spectrum) == DESI_UNIQUE_PIXELS
    assert np.all(np.diff(spectrum.wavelength) > 0)
    assert (spectrum.wavelength[0], spectrum.wavelength[-1]) == pytest.approx((3600.0, 9824.0))


def test_it_reads_desi_metadata_and_scores(tmp_path: Path) -> None:
    path = tmp_path / "coadd.fits"
    write_desi_coadd(path, n_targets=2)
    second = load_spectra(path)[1]
    assert (second.ra, second.dec) == pytest.approx((150.01, 2.01))
    assert second.snr == pytest.approx((3.0 + 5.0 + 7.0) / 3)  # SCORES B/R/Z of row 1
    assert (second.meta["OBJTYPE"], second.meta["SURVEY"], second.meta["PROGRAM"]) == (
        "TGT",
        "main",
        "dark",
    )
    assert second.meta["EBV"] == pytest.approx(0.02)


def test_it_writes_the_desi_mask_as_uint32_with_bzero(tmp_path: Path) -> None:
    path = tmp_path / "coadd.fits"
    write_desi_coadd(path, n_targets=1)
    with fits.open(path, do_not_scale_image_data=True) as hdus:
        assert hdus["B_MASK"].header["BZERO"] == 2**31
        assert hdus["B_MASK"].data.dtype.kind == "i"


def tiny_desi_arms(b_flux: float, r_flux: float, b_mask: int = 0) -> dict[str, DesiArm]:
    """B covers 5798.4..5800.0, R 5799.2..5800.8 on the shared 0.8 A grid (3 px, 2 overlap)."""
    b_wave = np.array([5798.4, 5799.2, 5800.0])
    r_wave = np.array([5799.2, 5800.0, 5800.8])
    return {
        "B": DesiArm(
            b_wave,
            np.array([[1.0, b_flux, b_flux]]),
            np.array([[1.0, 1.0, 1.0]]),
            np.array([[0, 0, b_mask]], dtype=np.uint32),
        ),
        "R": DesiArm(
            r_wave,
            np.array([[r_flux, r_flux, 9.0]]),
            np.array([[3.0, 3.0, 3.0]]),
            np.zeros((1, 3), dtype=np.uint32),
        ),
        # a Z arm far away, so that the file holds a spectrum's worth of pixels
        "Z": DesiArm(
            7600.0 + 0.8 * np.arange(60),
            np.ones((1, 60)),
            np.ones((1, 60)),
            np.zeros((1, 60), dtype=np.uint32),
        ),
    }


def test_it_combines_overlapping_desi_pixels_by_inverse_variance(tmp_path: Path) -> None:
    path = tmp_path / "coadd.fits"
    write_desi_coadd(path, n_targets=1, arms=tiny_desi_arms(b_flux=2.0, r_flux=6.0))
    spectrum = load_one(path)
    np.testing.assert_allclose(spectrum.wavelength[:4], [5798.4, 5799.2, 5800.0, 5800.8])
    # (2*1 + 6*3) / (1 + 3) = 5, ivar 1 + 3 = 4
    np.testing.assert_allclose(spectrum.flux[:4], [1.0, 5.0, 5.0, 9.0])
    np.testing.assert_allclose(spectrum.ivar[:4], [1.0, 4.0, 4.0, 3.0])


def test_it_leaves_masked_desi_pixels_out_of_the_weighting(tmp_path: Path) -> None:
    path = tmp_path / "coadd.fits"
    write_desi_coadd(path, n_targets=1, arms=tiny_desi_arms(b_flux=2.0, r_flux=6.0, b_mask=1 << 31))
    spectrum = load_one(path)
    assert spectrum.flux[2] == 6.0 and spectrum.ivar[2] == 3.0
    assert not spectrum.mask.any()


def test_it_masks_a_desi_pixel_that_only_one_arm_covers_and_flags(tmp_path: Path) -> None:
    arms = tiny_desi_arms(b_flux=2.0, r_flux=6.0)
    arms["R"].mask[0, 2] = 4
    path = tmp_path / "coadd.fits"
    write_desi_coadd(path, n_targets=1, arms=arms)
    spectrum = load_one(path)
    assert np.flatnonzero(spectrum.mask).tolist() == [3]
    assert spectrum.flux[3] == 9.0  # kept, not dropped


# --- merge_arms ---------------------------------------------------------------------------------


def arm(
    wavelength: list[float], flux: list[float], ivar: list[float], mask: list[bool] | None = None
) -> ArmPixels:
    return ArmPixels(
        np.array(wavelength),
        np.array(flux),
        np.array(ivar),
        np.zeros(len(wavelength), bool) if mask is None else np.array(mask),
    )


def test_it_interleaves_arm_pixels_that_do_not_coincide() -> None:
    merged = merge_arms(
        [
            arm([1000.0, 2000.0, 3000.0], [1, 2, 3], [1, 1, 1]),
            arm([2500.0, 3500.0], [9, 8], [1, 1]),
        ],
        source="test",
    )
    np.testing.assert_array_equal(merged.wavelength, [1000.0, 2000.0, 2500.0, 3000.0, 3500.0])
    np.testing.assert_array_equal(merged.flux, [1, 2, 9, 3, 8])


@pytest.mark.parametrize(
    ("offset", "merged_pixels"),
    [(0.0, 3), (5800.0 * 0.5e-6, 3), (5800.0 * 2e-6, 4)],
)
def test_it_merges_pixels_that_coincide_within_one_part_per_million(
    offset: float, merged_pixels: int
) -> None:
    merged = merge_arms(
        [arm([5799.2, 5800.0], [1, 1], [1, 1]), arm([5800.0 + offset, 5800.8], [1, 1], [1, 1])],
        source="test",
    )
    assert len(merged.wavelength) == merged_pixels


def test_it_weights_three_coincident_pixels_by_ivar() -> None:
    merged = merge_arms(
        [arm([5000.0, 6000.0], [0, 1], [1, 1]), arm([6000.0], [4], [2]), arm([6000.0], [10], [1])],
        source="test",
    )
    # (1*1 + 4*2 + 10*1) / (1 + 2 + 1) = 19/4
    assert merged.flux[1] == pytest.approx(4.75)
    assert merged.ivar[1] == pytest.approx(4.0)


def test_it_masks_a_merged_pixel_when_no_arm_has_good_data() -> None:
    merged = merge_arms(
        [arm([1.0, 2.0], [3, 4], [1, 1], [False, True]), arm([2.0, 3.0], [6, 7], [0, 1])],
        source="test",
    )
    assert merged.mask.tolist() == [False, True, False]
    assert merged.ivar[1] == 0.0
    assert merged.flux[1] == pytest.approx(5.0)  # plain mean, kept for display


# --- SpecVI-Bench parquet -----------------------------------------------------------------------


def test_it_reads_one_spectrum_per_specvi_row(tmp_path: Path) -> None:
    rows = [
        specvi_row(GRID, [1.0, 2.0, 3.0] * 20, None, name="CV 1", index=0),
        specvi_row(GRID + 1000.0, [4.0, 5.0] * 30, 0.5, data_source="specvi", name="", index=7),
    ]
    path = write_specvi_parquet(tmp_path / "test_cv.parquet", rows)
    first, second = load_spectra(path)
    assert (first.survey, first.object_id, first.redshift) == ("SpecVI-mini", "CV 1", 0.0)
    assert (second.survey, second.object_id, second.redshift) == ("SpecVI-Bench", "7", 0.5)
    assert second.source == f"{path}#row1"
    np.testing.assert_array_equal(second.flux, [4.0, 5.0] * 30)


def test_it_keeps_specvi_labels_in_meta(tmp_path: Path) -> None:
    rows = [specvi_row(GRID, [1.0] * 60, ground_truth="NO", task="gm", split="train", index=3)]
    spectrum = load_one(write_specvi_parquet(tmp_path / "train_gm.parquet", rows))
    assert spectrum.meta == {
        "data_source": "specvi-mini",
        "ground_truth": "NO",
        "index": 3,
        "split": "train",
        "task": "gm",
        "wavelength_frame": "vacuum",
        "wavelength_frame_source": "survey",
        "wavelength_frame_basis": "SpecVI-Bench spectra are LAMOST spectra, in vacuum",
    }


def test_it_names_the_row_without_create_kwargs(tmp_path: Path) -> None:
    good = specvi_row([1.0, 2.0], [1.0, 1.0])
    bad = specvi_row([1.0, 2.0], [1.0, 1.0])
    bad["extra_info"]["tools_kwargs"] = {"other_tool": {"create_kwargs": {"x": 1}}}
    path = write_specvi_parquet(tmp_path / "broken.parquet", [good, bad])
    assert_format_error(path, "row1", "spectral_visualization_tool")


# --- plain tables -------------------------------------------------------------------------------

# four pixels worth checking, then enough for a spectrum (MIN_SPECTRUM_PIXELS)
FILL = 56
WAVE = [4000.0, 4001.5, 4003.0, 4004.5] + [4006.0 + 1.5 * i for i in range(FILL)]
FLUX = [1.0, 2.5, -0.5, 3.25] + [1.0] * FILL
ERROR = [0.5, 0.25, 2.0, 1.0] + [1.0] * FILL
IVAR = [4.0, 16.0, 0.25, 1.0] + [1.0] * FILL


@pytest.mark.parametrize("writer", [write_table_csv, write_table_ascii])
def test_it_reads_a_table_with_header(tmp_path: Path, writer) -> None:
    spectrum = load_one(writer(tmp_path / "t.txt", WAVE, FLUX, ERROR))
    np.testing.assert_array_equal(spectrum.wavelength, WAVE)
    np.testing.assert_array_equal(spectrum.flux, FLUX)
    np.testing.assert_array_equal(spectrum.ivar, IVAR)
    assert spectrum.survey == "table"


@pytest.mark.parametrize(
    "header",
    [
        ("wave", "f", "sigma"),
        ("lambda", "flux", "flux_err"),
        ("lam", "FLUX", "err"),
        ("Wavelength", "Flux", "Error"),
    ],
)
def test_it_accepts_common_column_names(tmp_path: Path, header: tuple[str, ...]) -> None:
    spectrum = load_one(write_table_csv(tmp_path / "t.csv", WAVE, FLUX, ERROR, header=header))
    np.testing.assert_array_equal(spectrum.ivar, IVAR)


def test_it_reads_an_ivar_column(tmp_path: Path) -> None:
    path = write_table_csv(
        tmp_path / "t.csv",
        WAVE,
        FLUX,
        [1.0, 0.0, 2.0, 3.0] + [1.0] * FILL,
        header=("wavelength", "flux", "ivar"),
    )
    spectrum = load_one(path)
    np.testing.assert_array_equal(spectrum.ivar, [1.0, 0.0, 2.0, 3.0] + [1.0] * FILL)
    assert np.flatnonzero(spectrum.mask).tolist() == [1]


@pytest.mark.parametrize("writer", [write_table_csv, write_table_ascii])
def test_it_reads_two_headerless_columns_as_wavelength_and_flux(tmp_path: Path, writer) -> None:
    spectrum = load_one(writer(tmp_path / "t.dat", WAVE, FLUX, None, header=None))
    np.testing.assert_array_equal(spectrum.flux, FLUX)
    assert spectrum.ivar is None
    assert spectrum.meta["wavelength_frame_source"] == "assumed"


@pytest.mark.parametrize("writer", [write_table_csv, write_table_ascii])
def test_it_refuses_a_headerless_third_column_rather_than_take_it_for_an_error(
    tmp_path: Path, writer
) -> None:
    # the O9.5 star: the third column was flux in another unit, read as the uncertainty
    flux_fnu = [value * 3.3e-9 for value in FLUX]
    path = writer(tmp_path / "t.dat", WAVE, FLUX, flux_fnu, header=None)
    assert_format_error(
        path, "headerless table with 3 columns", "not guessed", "API parameter 'columns'"
    )


def test_it_reads_a_header_given_as_a_comment_line(tmp_path: Path) -> None:
    path = write_table_ascii(
        tmp_path / "t.txt", WAVE, FLUX, ERROR, header=None, comments=["wave flux err"]
    )
    np.testing.assert_array_equal(load_one(path).ivar, IVAR)


@pytest.mark.parametrize("error", [0.0, -1.0, float("nan"), float("inf")])
def test_it_masks_pixels_with_unusable_errors(tmp_path: Path, error: float) -> None:
    errors = [0.5, error, 2.0, 1.0] + [1.0] * FILL
    spectrum = load_one(write_table_csv(tmp_path / "t.csv", WAVE, FLUX, errors))
    assert spectrum.ivar[1] == 0.0
    assert np.flatnonzero(spectrum.mask).tolist() == [1]


@pytest.mark.parametrize(
    ("header", "comments", "factor"),
    [
        (("wavelength[nm]", "flux"), (), 10.0),
        (("wavelength (micron)", "flux"), (), 1e4),
        (("wavelength", "flux"), ("units: wavelength=um",), 1e4),
        (("wavelength", "flux"), ("wavelength_unit: nm",), 10.0),
        (("wavelength [Angstrom]", "flux"), (), 1.0),
        (("wave(AA)", "flux"), (), 1.0),
    ],
)
@pytest.mark.parametrize("writer", [write_table_csv, write_table_ascii])
def test_it_converts_wavelength_units_to_angstrom(
    tmp_path: Path, writer, header: tuple[str, ...], comments: tuple[str, ...], factor: float
) -> None:
    wavelength = list(np.linspace(4000.0, 6000.0, 60) / factor)
    spectrum = load_one(
        writer(tmp_path / "t.txt", wavelength, [1] * 60, header=header, comments=comments)
    )
    np.testing.assert_allclose(spectrum.wavelength, np.array(wavelength) * factor, rtol=1e-12)


def test_it_converts_an_npz_wavelength_unit(tmp_path: Path) -> None:
    path = write_table_npz(
        tmp_path / "t.npz", wavelength=GRID / 10.0, flux=[1.0] * 60, wavelength_unit="nm"
    )
    np.testing.assert_allclose(load_one(path).wavelength, GRID)


def test_it_reads_an_npz_table_with_error(tmp_path: Path) -> None:
    path = write_table_npz(tmp_path / "t.npz", wave=WAVE, flux=FLUX, err=ERROR)
    spectrum = load_one(path)
    np.testing.assert_array_equal(spectrum.wavelength, WAVE)
    np.testing.assert_array_equal(spectrum.ivar, IVAR)


@pytest.mark.parametrize(
    ("header", "comments"),
    [
        (("wavelength", "flux"), ("wavelength_frame: air",)),
        (("wavelength_air", "flux"), ()),
    ],
)
def test_it_converts_air_tables_to_vacuum(
    tmp_path: Path, header: tuple[str, ...], comments: tuple[str, ...]
) -> None:
    path = write_table_csv(tmp_path / "t.csv", BALMER, [1.0] * 60, header=header, comments=comments)
    spectrum = load_one(path)
    np.testing.assert_allclose(spectrum.wavelength[[0, -1]], [4862.68, 6564.61], atol=0.02)
    assert spectrum.meta["wavelength_frame_in_file"] == "air"
    assert spectrum.meta["wavelength_frame_source"] == "file"


def test_it_assumes_vacuum_for_tables_without_a_frame(tmp_path: Path) -> None:
    path = write_table_csv(tmp_path / "t.csv", BALMER, [1.0] * 60)
    spectrum = load_one(path)
    np.testing.assert_array_equal(spectrum.wavelength, BALMER)
    assert spectrum.meta["wavelength_frame"] == "vacuum"
    assert spectrum.meta["wavelength_frame_source"] == "assumed"


# --- content, not name --------------------------------------------------------------------------


def test_it_reads_a_fits_file_named_csv(tmp_path: Path) -> None:
    path = tmp_path / "really_lamost.csv"
    write_lamost_old(path, n_pixels=60)
    assert load_one(path).survey == "LAMOST"


def test_it_reads_a_csv_file_named_fits(tmp_path: Path) -> None:
    path = write_table_csv(tmp_path / "table.fits", WAVE, FLUX)
    assert load_one(path).survey == "table"


def test_it_reads_gzip_by_magic_bytes_whatever_the_name(tmp_path: Path) -> None:
    plain = write_table_csv(tmp_path / "t.csv", WAVE, FLUX)
    packed = tmp_path / "t.dat"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    np.testing.assert_array_equal(load_one(packed).flux, FLUX)


def test_it_reads_a_parquet_file_without_extension(tmp_path: Path) -> None:
    path = write_specvi_parquet(tmp_path / "download", [specvi_row(GRID, [1.0] * 60)])
    assert load_one(path).survey == "SpecVI-mini"


# --- bad input ----------------------------------------------------------------------------------


def test_it_refuses_an_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "empty.fits"
    path.write_bytes(b"")
    assert_format_error(path, "empty")


def test_it_refuses_a_missing_file(tmp_path: Path) -> None:
    assert_format_error(tmp_path / "absent.fits", "no such file")


@pytest.mark.parametrize(
    "content",
    [b"\x00\x01\x02\x03binary junk\xff\xfe" * 10, b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"],
)
def test_it_refuses_unknown_binary_content(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "mystery.bin"
    path.write_bytes(content)
    assert_format_error(path, "not a spectrum file")


def test_it_refuses_a_text_file_without_numbers(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("hello\nworld\n")
    assert_format_error(path, "missing column")


@pytest.mark.parametrize("keep_fraction", [0.01, 0.5, 0.95])
def test_it_refuses_a_truncated_fits_file(tmp_path: Path, keep_fraction: float) -> None:
    full = tmp_path / "full.fits"
    write_lamost_new(full, n_pixels=500)
    raw = full.read_bytes()
    path = tmp_path / "cut.fits"
    path.write_bytes(raw[: max(10, int(len(raw) * keep_fraction))])
    assert_format_error(path, "truncated")


def test_it_refuses_a_truncated_gzip_file(tmp_path: Path) -> None:
    full = tmp_path / "full.fits.gz"
    write_lamost_old(full, n_pixels=300)
    path = tmp_path / "cut.fits.gz"
    path.write_bytes(full.read_bytes()[:200])
    assert_format_error(path, "truncated", "gzip")


def test_it_refuses_a_fits_file_with_no_spectrum_layout(tmp_path: Path) -> None:
    path = tmp_path / "image.fits"
    fits.HDUList([fits.PrimaryHDU(), fits.ImageHDU(np.zeros(10), name="WHATEVER")]).writeto(path)
    assert_format_error(path, "not a spectrum file", "WHATEVER")


def test_it_names_the_missing_sdss_coadd_hdu(tmp_path: Path) -> None:
    path = tmp_path / "spec.fits"
    write_sdss_spec(path, include_coadd=False)
    assert_format_error(path, "missing HDU COADD")


def test_it_names_the_missing_desi_arm_hdu(tmp_path: Path) -> None:
    path = tmp_path / "coadd.fits"
    write_desi_coadd(path, n_targets=1, skip_hdus=("R_FLUX",))
    assert_format_error(path, "missing HDU R_FLUX")


def test_it_names_the_missing_sdss_column(tmp_path: Path) -> None:
    path = tmp_path / "spec.fits"
    write_sdss_spec(path, drop_columns=("flux",))
    assert_format_error(path, "HDU COADD", "no column 'flux'")


def test_it_names_the_missing_lamost_column(tmp_path: Path) -> None:
    path = tmp_path / "lamost.fits"
    write_lamost_new(path, n_pixels=20, columns={"FLUX": None})
    assert_format_error(path, "HDU COADD", "no column 'FLUX'")


def test_it_names_the_missing_table_column(tmp_path: Path) -> None:
    path = write_table_csv(tmp_path / "t.csv", WAVE, FLUX, header=("wavelength", "counts"))
    assert_format_error(path, "missing column 'flux'")


def test_it_refuses_a_length_mismatch_in_lamost_vectors(tmp_path: Path) -> None:
    path = tmp_path / "lamost.fits"
    write_lamost_new(path, n_pixels=20, columns={"IVAR": np.ones(19)})
    assert_format_error(path, "COADD", "length mismatch", "ivar has 19")


def test_it_refuses_a_ragged_table_row(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("wavelength,flux\n4000,1\n4001\n4002,3\n")
    assert_format_error(path, "length mismatch", "line 3")


def test_it_refuses_npz_arrays_of_different_lengths(tmp_path: Path) -> None:
    path = write_table_npz(tmp_path / "t.npz", wavelength=[1.0, 2.0, 3.0], flux=[1.0, 2.0])
    assert_format_error(path, "length mismatch", "wavelength has 3", "flux has 2")


def test_it_refuses_all_non_finite_flux(tmp_path: Path) -> None:
    path = write_table_csv(
        tmp_path / "t.csv", WAVE, [float("nan"), float("inf"), float("nan"), float("-inf")] * 15
    )
    assert_format_error(path, "all flux values are non-finite")


@pytest.mark.parametrize("bad", [0.0, -4001.0])
def test_it_refuses_non_positive_wavelengths(tmp_path: Path, bad: float) -> None:
    path = write_table_csv(tmp_path / "t.csv", [4000.0, bad, 4002.0], [1.0, 2.0, 3.0])
    assert_format_error(path, "must be positive", "pixel 1")


def test_it_refuses_a_non_finite_wavelength(tmp_path: Path) -> None:
    path = write_table_csv(tmp_path / "t.csv", [4000.0, float("nan"), 4002.0], [1.0, 2.0, 3.0])
    assert_format_error(path, "not finite", "pixel 1")


def test_it_refuses_a_duplicated_wavelength(tmp_path: Path) -> None:
    path = write_table_csv(tmp_path / "t.csv", [4000.0, 4001.0, 4000.0], [1.0, 2.0, 3.0])
    assert_format_error(path, "not monotonic", "duplicate wavelength 4000.0", "pixels 0 and 2")


def test_it_refuses_a_duplicated_wavelength_in_a_lamost_file(tmp_path: Path) -> None:
    grid = np.linspace(4000.0, 5000.0, 20)
    grid[10] = grid[9]
    path = tmp_path / "lamost.fits"
    write_lamost_new(path, n_pixels=20, columns={"WAVELENGTH": grid})
    assert_format_error(path, "duplicate wavelength")


@pytest.mark.parametrize("unit", ["furlongs", "km/s", "Hz"])
def test_it_refuses_an_unknown_wavelength_unit(tmp_path: Path, unit: str) -> None:
    path = write_table_csv(tmp_path / "t.csv", WAVE, FLUX, header=(f"wavelength[{unit}]", "flux"))
    assert_format_error(path, "unknown wavelength unit", unit)


def test_it_refuses_an_unknown_npz_unit(tmp_path: Path) -> None:
    path = write_table_npz(
        tmp_path / "t.npz", wavelength=WAVE, flux=FLUX, wavelength_unit="parsnips"
    )
    assert_format_error(path, "unknown wavelength unit", "parsnips")


def test_it_refuses_an_unknown_wavelength_frame(tmp_path: Path) -> None:
    path = write_table_csv(tmp_path / "t.csv", WAVE, FLUX, comments=("wavelength_frame: water",))
    assert_format_error(path, "frame", "water")


def test_it_refuses_a_non_numeric_value(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("wavelength,flux\n4000,1\n4001,abc\n")
    assert_format_error(path, "line 3", "'abc' is not a number")


def test_it_refuses_a_headerless_table_with_four_columns(tmp_path: Path) -> None:
    path = tmp_path / "t.txt"
    path.write_text("1 2 3 4\n5 6 7 8\n")
    assert_format_error(path, "headerless", "4 columns")


def test_it_refuses_a_single_pixel(tmp_path: Path) -> None:
    path = write_table_csv(tmp_path / "t.csv", [4000.0], [1.0])
    assert_format_error(path, "at least 2 pixels")


def test_it_refuses_a_corrupt_npz(tmp_path: Path) -> None:
    path = tmp_path / "t.npz"
    path.write_bytes(b"PK\x03\x04" + b"\x00" * 40)
    assert_format_error(path, "NPZ")


def test_it_refuses_a_corrupt_parquet(tmp_path: Path) -> None:
    path = tmp_path / "t.parquet"
    path.write_bytes(b"PAR1" + b"\x00" * 40)
    assert_format_error(path, "parquet")


# --- pixels: masked, sorted, never dropped -------------------------------------------------------


def test_it_keeps_and_masks_a_nan_flux_pixel(tmp_path: Path) -> None:
    path = write_table_csv(tmp_path / "t.csv", WAVE, [1.0, float("nan"), 3.0, 4.0] + [1.0] * FILL)
    spectrum = load_one(path)
    assert len(spectrum) == len(WAVE)
    assert np.isnan(spectrum.flux[1])
    assert np.flatnonzero(spectrum.mask).tolist() == [1]


def test_it_refuses_a_permuted_grid_as_not_monotonic(tmp_path: Path) -> None:
    grid = [4002.0, 4000.0, 4003.0, 4001.0] + WAVE[4:]
    path = write_table_csv(tmp_path / "t.csv", [g + 100 for g in grid], FLUX, ERROR)
    assert_format_error(
        path,
        "not a spectrum",
        "not monotonic",
        "falls to 4100 at pixel 1, then rises to 4103 at pixel 2",
    )


def test_it_reverses_a_decreasing_table_carrying_flux_and_errors(tmp_path: Path) -> None:
    path = write_table_csv(tmp_path / "t.csv", WAVE[::-1], FLUX[::-1], ERROR[::-1])
    spectrum = load_one(path)
    np.testing.assert_array_equal(spectrum.wavelength, WAVE)
    np.testing.assert_array_equal(spectrum.flux, FLUX)
    np.testing.assert_allclose(spectrum.ivar, IVAR)


def test_it_sorts_a_decreasing_lamost_grid(tmp_path: Path) -> None:
    grid = np.linspace(5000.0, 4000.0, 60)
    flux = np.arange(60.0)
    path = tmp_path / "lamost.fits"
    write_lamost_new(path, n_pixels=60, columns={"WAVELENGTH": grid, "FLUX": flux})
    spectrum = load_one(path)
    np.testing.assert_allclose(spectrum.wavelength, grid[::-1], rtol=1e-7)
    np.testing.assert_array_equal(spectrum.flux, flux[::-1])


# --- validate_arrays ----------------------------------------------------------------------------


def test_it_validates_and_unpacks_arrays() -> None:
    wavelength, flux, ivar, mask = validate_arrays(
        [3.0, 2.0, 1.0], [30.0, np.nan, 10.0], [1.0, 1.0, -1.0], source="api upload"
    )
    np.testing.assert_array_equal(wavelength, [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(flux[[0, 2]], [10.0, 30.0])
    np.testing.assert_array_equal(ivar, [-1.0, 1.0, 1.0])
    assert mask.tolist() == [True, True, False]


def test_it_names_the_source_in_validation_errors() -> None:
    with pytest.raises(SpectrumFormatError, match=r"^generator row 5: length mismatch"):
        validate_arrays([1.0, 2.0], [1.0, 2.0, 3.0], source="generator row 5")


def test_it_refuses_a_two_dimensional_flux() -> None:
    with pytest.raises(SpectrumFormatError, match="flux must be one-dimensional"):
        validate_arrays([1.0, 2.0], [[1.0, 2.0]], source="x")


def test_it_refuses_a_non_numeric_array() -> None:
    with pytest.raises(SpectrumFormatError, match="wavelength is not a numeric array"):
        validate_arrays(["a", "b"], [1.0, 2.0], source="x")


def test_it_ors_a_given_mask_with_bad_pixels() -> None:
    result = validate_arrays([1.0, 2.0, 3.0], [1.0, 1.0, 1.0], source="x", mask=[0, 4, 0])
    assert result.mask.tolist() == [False, True, False]


# --- NPZ bytes ----------------------------------------------------------------------------------


def test_it_round_trips_npz_bytes() -> None:
    original = sample_spectrum(survey="SDSS", source="upload.fits")
    original.mask[3] = True
    restored = spectrum_from_npz_bytes(spectrum_to_npz_bytes(original))
    for name in ("wavelength", "flux", "ivar", "mask"):
        np.testing.assert_array_equal(getattr(restored, name), getattr(original, name))
    for name in ("redshift", "survey", "object_id", "ra", "dec", "snr", "meta", "source"):
        assert getattr(restored, name) == getattr(original, name)


def test_it_round_trips_npz_bytes_without_ivar() -> None:
    original = Spectrum(np.array([1.0, 2.0]), np.array([np.nan, 5.0]))
    restored = spectrum_from_npz_bytes(spectrum_to_npz_bytes(original))
    assert restored.ivar is None
    assert restored.mask.tolist() == [True, False]


def test_it_stores_numpy_scalars_in_npz_meta() -> None:
    original = sample_spectrum(meta={"EBV": np.float32(0.5), "N": np.int64(3)})
    assert spectrum_from_npz_bytes(spectrum_to_npz_bytes(original)).meta == {"EBV": 0.5, "N": 3}


def test_it_loads_stored_npz_bytes_from_a_file(tmp_path: Path) -> None:
    path = tmp_path / "stored.npz"
    path.write_bytes(spectrum_to_npz_bytes(sample_spectrum(object_id="abc")))
    spectrum = load_one(path)
    assert (spectrum.object_id, spectrum.survey, spectrum.source) == ("abc", "LAMOST", str(path))


def test_it_refuses_npz_bytes_without_meta() -> None:
    buffer = io.BytesIO()
    np.savez(buffer, wavelength=[1.0, 2.0], flux=[1.0, 2.0])
    with pytest.raises(SpectrumFormatError, match="missing array"):
        spectrum_from_npz_bytes(buffer.getvalue())


# --- air and vacuum -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("air", "vacuum"),
    [(6562.80, 6564.61), (4861.33, 4862.68), (5889.95, 5891.58), (8542.09, 8544.44)],
)
def test_it_converts_air_to_vacuum_for_known_lines(air: float, vacuum: float) -> None:
    assert air_to_vacuum(air) == pytest.approx(vacuum, abs=0.02)
    assert vacuum_to_air(vacuum) == pytest.approx(air, abs=0.02)


def test_it_inverts_air_and_vacuum_conversion() -> None:
    wavelength = np.linspace(2500.0, 25000.0, 500)
    np.testing.assert_allclose(vacuum_to_air(air_to_vacuum(wavelength)), wavelength, atol=1e-3)


def test_it_leaves_wavelengths_below_2000_angstrom_unchanged() -> None:
    assert air_to_vacuum(1215.67) == 1215.67
    assert vacuum_to_air(1215.67) == 1215.67


def test_it_refuses_to_convert_non_positive_wavelengths() -> None:
    with pytest.raises(ValueError, match="positive"):
        air_to_vacuum(np.array([5000.0, 0.0]))


def test_it_refuses_an_npz_mask_of_another_length(tmp_path: Path) -> None:
    path = write_table_npz(tmp_path / "t.npz", wavelength=WAVE, flux=FLUX, error=ERROR, mask=[0, 1])
    assert_format_error(path, "length mismatch", "mask has 2")


def test_it_refuses_a_two_dimensional_npz_flux(tmp_path: Path) -> None:
    path = write_table_npz(tmp_path / "t.npz", wavelength=WAVE, flux=[FLUX, FLUX])
    assert_format_error(path, "flux must be one-dimensional")


def test_it_refuses_a_single_line_megabyte_of_text(tmp_path: Path) -> None:
    path = tmp_path / "blob.txt"
    path.write_text("x" * 1_000_000)
    assert_format_error(path, "not a spectrum file", "too long")


def test_it_keeps_other_header_comments_in_meta(tmp_path: Path) -> None:
    path = write_table_csv(tmp_path / "t.csv", WAVE, FLUX, comments=("object: HD 12345",))
    assert load_one(path).meta["header"] == {"object": "HD 12345"}


def test_it_reports_the_telescope_of_a_lamost_layout_file_written_elsewhere(tmp_path: Path) -> None:
    path = tmp_path / "synthetic.fits"
    save_lamost_fits(sample_spectrum(), path, header={"TELESCOP": "SpecVI-mini", "SYNTHET": True})
    spectrum = load_one(path)
    assert (spectrum.survey, spectrum.meta["SYNTHET"]) == ("SpecVI-mini", True)
    assert spectrum.meta["layout"] == "LAMOST COADD table (>= DR8)"
