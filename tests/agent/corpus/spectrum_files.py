"""Malformed spectrum files, made on the spot, each with what load_spectra must say about it.

Each case is (id, file name, builder, message parts): the builder returns the file's bytes
(some start from a valid file written by tests/agent/survey_fixtures.py and break it); every
message part must appear in the SpectrumFormatError, which also names the file.

Cases that tests/agent/test_spectra.py already has one test each for are not repeated here: an
empty file, a missing file, unknown binary, a text file without numbers, truncated FITS and gzip,
a FITS image HDU with no spectrum layout, missing HDUs and columns, length mismatches in LAMOST
vectors, table rows and NPZ arrays, all-NaN flux in a CSV, non-positive, non-finite and
duplicated wavelengths, unknown units and frames, a non-numeric value, four headerless columns,
a single pixel, corrupt NPZ and parquet. A wholly decreasing grid is not an error: it is sorted
(test_it_sorts_a_decreasing_lamost_grid).
"""

from __future__ import annotations

import gzip
import io
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from astropy.io import fits

from tests.agent.survey_fixtures import write_lamost_new, write_sdss_spec

Builder = Callable[[Path], bytes]

HTML_404 = b"""<!DOCTYPE html>
<html><head><title>404 Not Found</title></head>
<body><h1>Not Found</h1><p>The requested URL was not found on this server.</p></body></html>
"""


def _lamost(folder: Path, **columns: np.ndarray) -> bytes:
    path = folder / "lamost.fits"
    write_lamost_new(path, n_pixels=50, columns=columns)
    return path.read_bytes()


def _fits(*hdus: fits.hdu.base.ExtensionHDU | fits.PrimaryHDU) -> bytes:
    buffer = io.BytesIO()
    fits.HDUList(list(hdus)).writeto(buffer)
    return buffer.getvalue()


def _npz(**arrays: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def _parquet(**columns: list) -> bytes:
    buffer = io.BytesIO()
    pq.write_table(pa.table(columns), buffer)
    return buffer.getvalue()


def _rows(values: list[tuple[float, float]]) -> bytes:
    return ("wavelength,flux\n" + "".join(f"{w},{f}\n" for w, f in values)).encode()


def _sdss_gzip_with_garbage(folder: Path) -> bytes:
    path = folder / "spec.fits"
    write_sdss_spec(path)
    packed = bytearray(gzip.compress(path.read_bytes(), mtime=0))
    packed[20:60] = b"\xff" * 40  # a damaged download: the deflate stream breaks early
    return bytes(packed)


CASES: list[tuple[str, str, Builder, tuple[str, ...]]] = [
    (
        "an HTML error page saved as .fits",
        "spec-55859-F5902_sp01-001.fits",
        lambda folder: HTML_404,
        ("not a spectrum file", "an HTML page"),
    ),
    (
        "a gzipped HTML page saved as .fits.gz",
        "spec-55859-F5902_sp01-001.fits.gz",
        lambda folder: gzip.compress(HTML_404, mtime=0),
        ("not a spectrum file", "an HTML page"),
    ),
    (
        "a VOTable saved as .fits",
        "spectrum.fits",
        lambda folder: b'<?xml version="1.0"?>\n<VOTABLE version="1.4"></VOTABLE>\n',
        ("not a spectrum file", "XML"),
    ),
    (
        "a FITS file with a header and no data HDU",
        "header-only.fits",
        lambda folder: _fits(fits.PrimaryHDU()),
        ("not a spectrum file", "FITS layout not recognised", "HDUs: PRIMARY"),
    ),
    (
        "a COADD table with flux but no wavelength column",
        "coadd.fits",
        lambda folder: _fits(
            fits.PrimaryHDU(),
            fits.BinTableHDU.from_columns(
                [fits.Column(name="FLUX", format="E", array=np.ones(5))], name="COADD"
            ),
        ),
        ("HDU COADD", "neither a 'loglam' (SDSS) nor a 'WAVELENGTH' (LAMOST) column"),
    ),
    (
        "a LAMOST file whose flux is all NaN",
        "lamost.fits",
        lambda folder: _lamost(folder, FLUX=np.full(50, np.nan)),
        ("all flux values are non-finite",),
    ),
    (
        "an NPZ table whose flux is all NaN",
        "table.npz",
        lambda folder: _npz(wavelength=4000.0 + np.arange(5), flux=np.full(5, np.nan)),
        ("all flux values are non-finite",),
    ),
    (
        "an NPZ table without flux",
        "table.npz",
        lambda folder: _npz(wavelength=4000.0 + np.arange(5)),
        ("missing column 'flux'", "found ['wavelength']"),
    ),
    (
        "a gzip member holding nothing",
        "empty.fits.gz",
        lambda folder: gzip.compress(b"", mtime=0),
        ("empty file (gzip holds no data)",),
    ),
    (
        "a gzip stream damaged in the middle",
        "spec.fits.gz",
        _sdss_gzip_with_garbage,
        ("truncated or corrupt gzip data",),
    ),
    (
        "a CSV with a header and no rows",
        "table.csv",
        lambda folder: b"wavelength,flux\n",
        ("table has a header but no data rows",),
    ),
    (
        "a CSV of comments only",
        "table.csv",
        lambda folder: b"# wavelength,flux\n# exported 2024-01-01\n",
        ("not a spectrum file: no data rows",),
    ),
    (
        "a CSV whose flux column is words",
        "table.csv",
        lambda folder: b"wavelength,flux\n4000,high\n4001,low\n",
        ("line 2, column 2: 'high' is not a number",),
    ),
    (
        "a semicolon-separated table (a spreadsheet's CSV)",
        "table.csv",
        lambda folder: b"wavelength;flux\n4000;1.0\n4001;2.0\n",
        ("missing column 'wavelength'", "found ['wavelength;flux']"),
    ),
    (
        "a UTF-16 text export",
        "table.txt",
        lambda folder: "wavelength,flux\n4000,1\n4001,2\n".encode("utf-16"),
        ("not a spectrum file", "binary content is not FITS, parquet, NPZ or gzip"),
    ),
    (
        "two exposures concatenated: the grid starts again",
        "table.csv",
        lambda folder: _rows([(4000.0 + i, 1.0) for i in range(5)] * 2),
        ("not monotonic", "duplicate wavelength 4000.0 at pixels 0 and 5"),
    ),
    (
        "a trajectory JSON uploaded as a spectrum",
        "trajectory.fits",
        lambda folder: json.dumps({"id": "t1", "steps": []}).encode() + b"\n",
        ("missing column 'wavelength'",),
    ),
    (
        "a parquet file that is not SpecVI-Bench",
        "train_cv.parquet",
        lambda folder: _parquet(prompt=["hello"], label=["YES"]),
        ("parquet file has no column 'extra_info'",),
    ),
]
