"""Catalog exports (CSV, VOTable, FITS) written in bounded memory, at any number of rows.

Rows are read from the database in chunks and written to a temporary file as they arrive, so
the peak memory of an export is a few chunks whatever its size (the CSV export streams the same
way, straight to the response). Astropy writes the headers (fields, units, UCDs, descriptions),
the rows are encoded here: its table writers need the whole table in memory.
"""

from __future__ import annotations

import base64
import csv
import struct
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import IO, Any

import numpy as np
from django.db.models import Func, IntegerField, Max, QuerySet
from numpy.typing import DTypeLike

from annotation.catalog.columns import _SOURCES, CATALOG_COLUMNS, COLUMN_NAMES
from annotation.catalog.search import CatalogQueryError
from annotation.core.tempfiles import temp_dir
from annotation.inspections.models import CatalogEntry

EXPORT_CHUNK_ROWS = 5_000
TIME_WIDTH = len("2026-01-01T00:00:00Z")
FITS_BLOCK = 2880


@dataclass
class ExportFile:
    """A finished export: ``file`` is positioned at 0 and deletes itself when closed."""

    file: IO[bytes]
    rows: int
    truncated: bool
    limit: int


class OctetLength(Func):
    """Length of a text column in UTF-8 bytes (FITS text columns are fixed-width bytes)."""

    function = "OCTET_LENGTH"
    output_field = IntegerField()

    def as_sqlite(self, compiler: Any, connection: Any, **extra: Any) -> Any:
        return self.as_sql(
            compiler, connection, template="LENGTH(CAST(%(expressions)s AS BLOB))", **extra
        )


def _is_truncated(rows: QuerySet[CatalogEntry], limit: int) -> bool:
    return rows.order_by().values("pk")[limit : limit + 1].exists()


def _row_chunks(rows: QuerySet[CatalogEntry], limit: int) -> Iterator[list[tuple[Any, ...]]]:
    chunk: list[tuple[Any, ...]] = []
    for record in rows.values_list(*_SOURCES)[:limit].iterator(chunk_size=EXPORT_CHUNK_ROWS):
        chunk.append(record)
        if len(chunk) >= EXPORT_CHUNK_ROWS:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _new_file() -> IO[bytes]:
    # Always on disk: a spooled file would hold its first megabytes in memory and copy them once.
    return tempfile.TemporaryFile(prefix="specvet-export-", dir=temp_dir())


def _check_limit(limit: int) -> None:
    if limit < 1:
        raise CatalogQueryError(f"limit must be at least 1; got {limit}")


# --- VOTable ----------------------------------------------------------------------------------


def _votable_head(*, truncated: bool, limit: int, query: str) -> tuple[bytes, bytes]:
    """The document up to the table data and after it, written by astropy from an empty table."""
    import io

    from astropy.io.votable import from_table, writeto
    from astropy.io.votable.tree import Info
    from astropy.table import Column, Table

    dtypes: dict[str, DTypeLike] = {
        "int": np.int64,
        "float": np.float64,
        "bool": bool,
        "str": "U1",
        "time": "U1",
    }
    table = Table()
    for column in CATALOG_COLUMNS:
        meta: dict[str, str] = {"ucd": column.ucd}
        if column.kind == "time":
            meta["xtype"] = "timestamp"
        table[column.name] = Column(
            np.array([], dtype=dtypes[column.kind]),
            unit=column.unit if column.kind == "float" else None,
            description=column.description,
            meta=meta,
        )
    votable = from_table(table)
    resource = votable.resources[0]
    resource.infos.append(Info(name="QUERY_STATUS", value="OVERFLOW" if truncated else "OK"))
    resource.infos.append(Info(name="ROW_LIMIT", value=str(limit)))
    if query:
        resource.infos.append(Info(name="QUERY", value=query))
    votable_table = resource.tables[0]
    votable_table.name = "catalog"
    for field, column in zip(votable_table.fields, CATALOG_COLUMNS, strict=True):
        if column.kind in ("str", "time"):
            field.arraysize = "*"  # variable length: no need to know the longest value first
        elif column.kind == "bool":
            field.datatype = "boolean"  # one byte T/F in BINARY, unlike packed bits
    buffer = io.BytesIO()
    writeto(votable, buffer)
    document = buffer.getvalue()
    split = document.rindex(b"</TABLE>")
    return (
        document[:split] + b'<DATA><BINARY><STREAM encoding="base64">\n',
        b"\n</STREAM></BINARY></DATA>\n" + document[split:],
    )


def _unicode_char(text: str) -> bytes:
    # unicodeChar is UCS-2: characters outside the Basic Multilingual Plane cannot be written.
    encoded = "".join(ch if ord(ch) < 0x10000 else "\ufffd" for ch in text).encode("utf-16-be")
    return struct.pack(">I", len(encoded) // 2) + encoded


def _votable_row(record: tuple[Any, ...]) -> bytes:
    parts: list[bytes] = []
    for column, value in zip(CATALOG_COLUMNS, record, strict=True):
        kind = column.kind
        if kind == "int":
            parts.append(struct.pack(">q", 0 if value is None else value))
        elif kind == "float":
            parts.append(struct.pack(">d", np.nan if value is None else value))
        elif kind == "bool":
            parts.append(b"?" if value is None else (b"T" if value else b"F"))
        elif kind == "time":
            parts.append(_unicode_char(_iso_utc(value)))
        else:
            parts.append(_unicode_char(value or ""))
    return b"".join(parts)


def write_votable(rows: QuerySet[CatalogEntry], *, limit: int, query: str = "") -> ExportFile:
    """VOTable 1.4, BINARY serialization, FIELD units/UCDs/descriptions; QUERY_STATUS is
    OVERFLOW when the row limit cut the result (the IVOA DALI convention)."""
    _check_limit(limit)
    truncated = _is_truncated(rows, limit)
    head, tail = _votable_head(truncated=truncated, limit=limit, query=query)
    out = _new_file()
    out.write(head)
    count = 0
    carry = b""  # base64 works on 3-byte groups: keep the remainder for the next chunk
    for chunk in _row_chunks(rows, limit):
        count += len(chunk)
        data = carry + b"".join(_votable_row(record) for record in chunk)
        cut = len(data) - len(data) % 3
        out.write(base64.b64encode(data[:cut]))
        carry = data[cut:]
    out.write(base64.b64encode(carry))
    out.write(tail)
    out.seek(0)
    return ExportFile(file=out, rows=count, truncated=truncated, limit=limit)


# --- FITS -------------------------------------------------------------------------------------


def _text_widths(rows: QuerySet[CatalogEntry]) -> dict[str, int]:
    """Bytes of the longest UTF-8 value of each text column among the matching rows."""
    text_sources = [column.source for column in CATALOG_COLUMNS if column.kind == "str"]
    longest = rows.order_by().aggregate(
        **{source: Max(OctetLength(source)) for source in text_sources}
    )
    return {source: max(int(longest[source] or 0), 1) for source in text_sources}


def _fits_layout(widths: dict[str, int]) -> tuple[list[Any], np.dtype]:
    from astropy.io import fits

    columns, dtype = [], []
    for column in CATALOG_COLUMNS:
        if column.kind == "int":
            fits_format, numpy_type = "K", ">i8"
        elif column.kind == "float":
            fits_format, numpy_type = "D", ">f8"
        elif column.kind == "bool":
            fits_format, numpy_type = "L", "S1"
        else:
            width = TIME_WIDTH if column.kind == "time" else widths[column.source]
            fits_format, numpy_type = f"{width}A", f"S{width}"
        columns.append(
            fits.Column(
                name=column.name,
                format=fits_format,
                unit=column.unit if column.kind == "float" and column.unit else None,
            )
        )
        dtype.append((column.name, numpy_type))
    return columns, np.dtype(dtype)


def _fits_text(value: str | None, width: int) -> bytes:
    encoded = (value or "").encode("utf-8")
    if len(encoded) <= width:
        return encoded
    # A row written after the widths were measured: cut at a character boundary.
    return encoded[:width].decode("utf-8", "ignore").encode("utf-8")


def _fits_rows(chunk: list[tuple[Any, ...]], dtype: np.dtype) -> bytes:
    array = np.zeros(len(chunk), dtype=dtype)
    for column, values in zip(CATALOG_COLUMNS, zip(*chunk, strict=True), strict=True):
        name = column.name
        if column.kind == "int":
            array[name] = [0 if value is None else value for value in values]
        elif column.kind == "float":
            array[name] = [np.nan if value is None else value for value in values]
        elif column.kind == "bool":
            array[name] = [
                b"\0" if value is None else (b"T" if value else b"F") for value in values
            ]
        elif column.kind == "time":
            array[name] = [_iso_utc(value).encode("ascii") for value in values]
        else:
            width = dtype[name].itemsize
            array[name] = [_fits_text(value, width) for value in values]
    return array.tobytes()


def write_fits(rows: QuerySet[CatalogEntry], *, limit: int, query: str = "") -> ExportFile:
    """A FITS file whose first extension is the catalog (BINTABLE with TUNITn, TCOMMn, TUCDn)."""
    from astropy.io import fits

    _check_limit(limit)
    truncated = _is_truncated(rows, limit)
    columns, dtype = _fits_layout(_text_widths(rows))
    hdu = fits.BinTableHDU.from_columns(columns, nrows=0, name="CATALOG")
    header = hdu.header
    for number, column in enumerate(CATALOG_COLUMNS, start=1):
        header[f"TCOMM{number}"] = column.description
        if column.ucd:
            header[f"TUCD{number}"] = column.ucd
    header["ORIGIN"] = "specvet"
    header["ROWLIMIT"] = (limit, "rows at most in this export")
    header["TRUNCATD"] = (truncated, "True: more rows matched than ROWLIMIT")
    if query:
        header["HISTORY"] = f"catalog query: {query}"
    out = _new_file()
    out.write(fits.PrimaryHDU().header.tostring().encode("ascii"))
    header_at = out.tell()
    header_bytes = header.tostring().encode("ascii")
    out.write(header_bytes)
    count = 0
    for chunk in _row_chunks(rows, limit):
        count += len(chunk)
        out.write(_fits_rows(chunk, dtype))
    data_bytes = count * dtype.itemsize
    out.write(b"\0" * (-data_bytes % FITS_BLOCK))
    # The row count is known only now: rewrite the header in place (same cards, same length).
    header["NAXIS2"] = count
    final_header = header.tostring().encode("ascii")
    if len(final_header) != len(header_bytes):
        raise RuntimeError("the FITS header changed length while it was patched")
    out.seek(header_at)
    out.write(final_header)
    out.seek(0)
    return ExportFile(file=out, rows=count, truncated=truncated, limit=limit)


# --- CSV ----------------------------------------------------------------------------------


def _iso_utc(value: datetime | None) -> str:
    if value is None:
        return ""
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _export_values(rows: QuerySet[CatalogEntry], limit: int | None) -> QuerySet[Any]:
    values = rows.values_list(*_SOURCES)
    return values[:limit] if limit is not None else values


class _Echo:
    def write(self, value: str) -> str:
        return value


_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _csv_cell(kind: str, value: Any) -> Any:
    if value is None:
        return ""
    if kind == "bool":
        return "true" if value else "false"
    if kind == "time":
        return _iso_utc(value)
    if kind == "str" and value.startswith(_FORMULA_START):
        # Spreadsheets run a cell that starts like a formula; the quote keeps it text.
        return "'" + value
    return value


def catalog_csv_chunks(
    rows: QuerySet[CatalogEntry], *, limit: int | None = None, rows_per_chunk: int = 500
) -> Iterator[str]:
    """The CSV export as text chunks: a header line, then every matching row (streamed)."""
    writer = csv.writer(_Echo(), lineterminator="\n")
    kinds = [column.kind for column in CATALOG_COLUMNS]
    yield writer.writerow(COLUMN_NAMES)
    lines: list[str] = []
    for record in _export_values(rows, limit).iterator(chunk_size=2000):
        lines.append(
            writer.writerow(
                [_csv_cell(kind, value) for kind, value in zip(kinds, record, strict=True)]
            )
        )
        if len(lines) >= rows_per_chunk:
            yield "".join(lines)
            lines = []
    if lines:
        yield "".join(lines)
