"""load_spectra under ReadLimits: bombs are refused early, with the file, the limit and the setting
that raises it, and the memory a refusal costs stays under twice the byte limit."""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import zipfile
from pathlib import Path

import numpy as np
import pytest
from astropy.io import fits

from agent.bench.bombs import (
    csv_gz_rows,
    fits_gz_zeros,
    format_bomb_report,
    measure_peak,
    npy_header,
    npz_lying_member,
    npz_zeros,
    parquet_long_row,
    parquet_many_rows,
    run_bomb_benchmark,
    write_zip,
)
from agent.reading import MIB, UnsafeArchive, iter_zip_member
from agent.spectra import ReadLimits, SpectrumFormatError, SpectrumTooLarge, load_spectra
from tests.agent.survey_fixtures import write_desi_coadd, write_table_csv

LIMIT = 8 * MIB
LIMITS = ReadLimits(max_uncompressed_bytes=LIMIT)


def refused_within_memory(path: Path, limits: ReadLimits = LIMITS) -> str:
    """Load ``path``; it must be refused as too large, costing under twice the byte limit."""
    measured = measure_peak(lambda: load_spectra(path, limits=limits))
    assert isinstance(measured.error, SpectrumTooLarge), measured.error
    assert measured.peak_bytes < 2 * limits.max_uncompressed_bytes, measured.peak_bytes
    message = str(measured.error)
    assert path.name in message
    return message


def assert_names_the_byte_limit(message: str) -> None:
    assert f"the limit is {LIMIT} bytes (8 MiB)" in message
    assert "raise SPECTRUM_MAX_UNCOMPRESSED_BYTES (ReadLimits.max_uncompressed_bytes)" in message


# --- bombs ---------------------------------------------------------------------------------------


def test_it_refuses_a_gzipped_fits_of_zeros_before_inflating_it(tmp_path):
    bomb = fits_gz_zeros(tmp_path, 64 * MIB)
    assert bomb.path.stat().st_size < MIB
    message = refused_within_memory(bomb.path)
    assert f"more than {LIMIT} bytes once decompressed" in message
    assert_names_the_byte_limit(message)


def test_it_refuses_a_gzipped_csv_of_long_rows_while_streaming_it(tmp_path):
    bomb = csv_gz_rows(tmp_path, 400_000, row=b"4000.000000000000000000,1.000000000000000000\n")
    assert bomb.path.stat().st_size < MIB
    message = refused_within_memory(bomb.path)
    assert f"more than {LIMIT} bytes once decompressed" in message
    assert_names_the_byte_limit(message)


def test_it_counts_the_numbers_of_a_gzipped_csv_of_short_rows_against_the_limit(tmp_path):
    bomb = csv_gz_rows(tmp_path, 1_000_000)
    limits = ReadLimits(max_uncompressed_bytes=2 * MIB)
    message = refused_within_memory(bomb.path, limits)
    assert "more than 131072 rows of 2 numbers, more than 2097152 bytes as float64" in message
    assert "raise SPECTRUM_MAX_UNCOMPRESSED_BYTES" in message


def test_it_refuses_an_npz_of_a_huge_zero_array_from_its_declared_size(tmp_path):
    bomb = npz_zeros(tmp_path, 16_000_000)
    assert bomb.path.stat().st_size < MIB
    assert_names_the_byte_limit(refused_within_memory(bomb.path))


def test_it_refuses_an_npz_member_that_inflates_past_its_declared_size(tmp_path):
    bomb = npz_lying_member(tmp_path, 64 * MIB)
    measured = measure_peak(lambda: load_spectra(bomb.path, limits=LIMITS))
    assert isinstance(measured.error, SpectrumFormatError)
    assert measured.peak_bytes < 2 * LIMIT
    message = str(measured.error)
    assert "lying.npz member 'flux.npy' unpacks to more than the 152 bytes its header declares" in (
        message
    )


def test_it_refuses_an_npy_header_that_disagrees_with_its_member_size(tmp_path):
    header = npy_header((1_000_000_000,))
    path = tmp_path / "table.npz"
    write_zip(path, [("flux.npy", [header + bytes(24)], None)])
    limits = ReadLimits(max_uncompressed_bytes=LIMIT, max_pixels=2_000_000_000)
    measured = measure_peak(lambda: load_spectra(path, limits=limits))
    assert isinstance(measured.error, SpectrumFormatError)
    assert "says 8000000000 bytes of data but its member holds 24" in str(measured.error)
    assert measured.peak_bytes < 2 * LIMIT


def test_it_refuses_a_parquet_row_of_a_huge_list_from_the_footer(tmp_path):
    bomb = parquet_long_row(tmp_path, 2_000_000)
    assert bomb.path.stat().st_size < MIB
    message = refused_within_memory(bomb.path)
    assert "its columns hold 4000001 values" in message
    assert_names_the_byte_limit(message)


def test_it_refuses_a_parquet_of_more_rows_than_spectra_allowed(tmp_path):
    bomb = parquet_many_rows(tmp_path, 120)
    limits = ReadLimits(max_uncompressed_bytes=LIMIT, max_spectra=100)
    message = refused_within_memory(bomb.path, limits)
    assert "120 rows (spectra) in one file; the limit is 100" in message
    assert "raise SPECTRUM_MAX_SPECTRA_PER_FILE (ReadLimits.max_spectra)" in message


@pytest.mark.parametrize(("suffix", "pack"), [(".bz2", bz2.compress), (".xz", lzma.compress)])
def test_it_refuses_bzip2_and_xz_bombs_while_inflating(tmp_path, suffix, pack):
    path = tmp_path / f"spec.fits{suffix}"
    path.write_bytes(pack(b"SIMPLE  = " + bytes(40 * MIB)))
    assert path.stat().st_size < MIB
    assert_names_the_byte_limit(refused_within_memory(path))


def test_it_refuses_an_uncompressed_file_over_the_limit_without_reading_it(tmp_path):
    path = tmp_path / "big.csv"
    with path.open("wb") as handle:
        handle.truncate(LIMIT + 1)  # sparse: it would be refused as binary if it were read
    message = refused_within_memory(path)
    assert f"{LIMIT + 1} bytes in one file" in message
    assert_names_the_byte_limit(message)


def test_it_refuses_a_compressed_fits_image_declaring_a_huge_size(tmp_path):
    buffer = io.BytesIO()
    fits.HDUList([fits.PrimaryHDU(), fits.CompImageHDU(np.zeros((10, 10), np.float32))]).writeto(
        buffer
    )
    raw = buffer.getvalue()
    for key in (b"ZNAXIS1", b"ZNAXIS2"):  # astropy would allocate 40 GB before inflating tiles
        at = raw.index(key.ljust(8) + b"= ")
        raw = raw[: at + 10] + b"100000".rjust(20) + raw[at + 30 :]
    path = tmp_path / "image.fits"
    path.write_bytes(raw)
    message = refused_within_memory(path)
    assert "a compressed image that inflates to 40000000000 bytes" in message
    assert_names_the_byte_limit(message)


def test_it_refuses_a_fits_header_of_too_many_cards_before_astropy_parses_it(tmp_path):
    cards = b"".join(f"COMMENT card {i}".ljust(80).encode() for i in range(110_000))
    raw = b"SIMPLE  =                    T".ljust(80) + cards + b"END".ljust(80)
    path = tmp_path / "cards.fits.gz"
    path.write_bytes(gzip.compress(raw + b" " * (-len(raw) % 2880)))
    limits = ReadLimits(max_uncompressed_bytes=16 * MIB)
    measured = measure_peak(lambda: load_spectra(path, limits=limits))
    assert "not a spectrum file: more than 100000 header cards" in str(measured.error)
    assert measured.peak_bytes < 2 * len(raw)  # astropy's cards would take ten times the text


# --- pixels and spectra ----------------------------------------------------------------------------


def test_it_refuses_a_table_with_more_rows_than_pixels_allowed(tmp_path):
    path = write_table_csv(tmp_path / "t.csv", 4000.0 + np.arange(101), np.ones(101))
    with pytest.raises(SpectrumTooLarge) as raised:
        load_spectra(path, limits=ReadLimits(max_pixels=100))
    message = str(raised.value)
    assert "t.csv: more than 100 rows (pixels) in one spectrum; the limit is 100" in message
    assert "raise SPECTRUM_MAX_PIXELS (ReadLimits.max_pixels)" in message


def test_it_reads_a_table_of_exactly_the_pixels_allowed(tmp_path):
    path = write_table_csv(tmp_path / "t.csv", 4000.0 + np.arange(100), np.ones(100))
    (spectrum,) = load_spectra(path, limits=ReadLimits(max_pixels=100))
    assert len(spectrum) == 100


def test_it_refuses_a_desi_coadd_with_more_targets_than_spectra_allowed(tmp_path):
    path = tmp_path / "coadd.fits"
    write_desi_coadd(path, n_targets=3)
    with pytest.raises(SpectrumTooLarge, match=r"3 targets \(FIBERMAP rows\); the limit is 2"):
        load_spectra(path, limits=ReadLimits(max_spectra=2))
    assert len(load_spectra(path, limits=ReadLimits(max_spectra=3))) == 3


def test_it_refuses_an_npz_array_with_more_values_than_pixels_allowed(tmp_path):
    path = tmp_path / "t.npz"
    np.savez(path, wavelength=4000.0 + np.arange(50), flux=np.ones(50))
    with pytest.raises(SpectrumTooLarge, match="array 'wavelength' has 50 values; the limit is 49"):
        load_spectra(path, limits=ReadLimits(max_pixels=49))


def test_it_refuses_limits_that_are_not_positive_integers():
    with pytest.raises(ValueError, match="ReadLimits.max_pixels must be a positive integer"):
        ReadLimits(max_pixels=0)


# --- what still reads ------------------------------------------------------------------------------


def test_it_reads_an_excel_csv_with_a_utf8_byte_order_mark(tmp_path):
    rows = "".join(f"{4000 + i},{1 + i / 10}\r\n" for i in range(60))
    plain = tmp_path / "plain.csv"
    plain.write_text("wavelength,flux\r\n" + rows)
    excel = tmp_path / "excel.csv"
    excel.write_bytes(b"\xef\xbb\xbf" + plain.read_bytes())
    (expected,) = load_spectra(plain)
    (spectrum,) = load_spectra(excel)
    np.testing.assert_array_equal(spectrum.wavelength, expected.wavelength)
    np.testing.assert_array_equal(spectrum.flux, expected.flux)


@pytest.mark.parametrize("pack", [gzip.compress, bz2.compress, lzma.compress])
def test_it_reads_a_compressed_table_as_the_plain_one(tmp_path, pack):
    plain = write_table_csv(tmp_path / "t.csv", 4000.0 + np.arange(60), np.arange(60.0))
    packed = tmp_path / "t.csv.packed"
    packed.write_bytes(pack(plain.read_bytes()))
    np.testing.assert_array_equal(load_spectra(packed)[0].flux, load_spectra(plain)[0].flux)


def test_it_reads_an_npz_of_our_own_zip_writer(tmp_path):
    path = tmp_path / "t.npz"
    buffer = io.BytesIO()
    np.save(buffer, 4000.0 + np.arange(60))
    wavelength = buffer.getvalue()
    buffer = io.BytesIO()
    np.save(buffer, np.arange(60.0))
    write_zip(
        path, [("wavelength.npy", [wavelength], None), ("flux.npy", [buffer.getvalue()], None)]
    )
    np.testing.assert_array_equal(load_spectra(path)[0].flux, np.arange(60.0))


# --- zip members ---------------------------------------------------------------------------------


def test_it_refuses_a_zip_member_shorter_than_it_declares(tmp_path):
    path = tmp_path / "t.zip"
    write_zip(path, [("a.txt", [b"hello"], 10)])
    raw = path.read_bytes()
    (info,) = zipfile.ZipFile(io.BytesIO(raw)).infolist()
    with pytest.raises(UnsafeArchive, match="unpacks to 5 bytes; its header declares 10"):
        list(iter_zip_member(raw, info, where="t.zip", budget=100))


def test_it_refuses_a_bzip2_zip_member_it_cannot_inflate_in_bounded_steps():
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_BZIP2) as archive:
        archive.writestr("a.txt", b"x" * 100)
    raw = buffer.getvalue()
    (info,) = zipfile.ZipFile(io.BytesIO(raw)).infolist()
    with pytest.raises(UnsafeArchive, match="only stored or deflated members are read"):
        list(iter_zip_member(raw, info, where="t.zip", budget=1000))


# --- the benchmark -------------------------------------------------------------------------------


def test_it_reports_every_bomb_refused_under_twice_the_limit():
    summary = run_bomb_benchmark(limit_bytes=MIB, scale=0.01)
    assert [row["refused"] for row in summary["rows"]] == [True] * 6
    assert all(row["peak_bytes"] < 2 * MIB for row in summary["rows"])
    report = format_bomb_report(summary)
    assert "fits.gz of zeros" in report and "peak/limit" in report
