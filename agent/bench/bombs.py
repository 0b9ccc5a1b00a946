"""Decompression and parse bombs against load_spectra: file size, expanded size, limit, peak memory.

    python -m agent.bench bombs [--limit-mib 64] [--scale 1.0]

Each bomb is written small on disk, streamed so that building it never holds its expanded size
in memory (except the parquet one, which pyarrow builds in memory), then read under
``ReadLimits(max_uncompressed_bytes=limit)``. Peak memory is tracemalloc's peak (Python objects
and numpy arrays) plus the peak of Arrow's memory pool during the read.
"""

from __future__ import annotations

import gc
import gzip
import struct
import tempfile
import tracemalloc
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from agent.reading import MIB, ReadLimits, SpectrumFormatError
from agent.spectra import load_spectra

_ZERO_CHUNK = bytes(MIB)
_ARROW_POOLS: list[Any] = []  # kept alive: Arrow buffers made in a pool free into it later


@dataclass(frozen=True)
class Bomb:
    name: str
    path: Path
    expanded_bytes: int  # what the file expands to, or claims to hold


@dataclass(frozen=True)
class Measured:
    result: Any
    error: BaseException | None
    peak_bytes: int


def measure_peak(call: Callable[[], Any]) -> Measured:
    """Run ``call``; its result or exception, and the peak memory it allocated on top of what
    was allocated before (tracemalloc, which sees numpy arrays, plus Arrow's pool)."""
    gc.collect()
    pool, previous = _arrow_proxy_pool()
    was_tracing = tracemalloc.is_tracing()
    if not was_tracing:
        tracemalloc.start()
    baseline = tracemalloc.get_traced_memory()[0]
    tracemalloc.reset_peak()
    result: Any = None
    error: BaseException | None = None
    try:
        result = call()
    except Exception as exc:  # the caller inspects it
        error = exc
    finally:
        python_peak = tracemalloc.get_traced_memory()[1] - baseline
        if not was_tracing:
            tracemalloc.stop()
        arrow_peak = 0
        if pool is not None:
            import pyarrow as pa

            pa.set_memory_pool(previous)
            arrow_peak = pool.max_memory()
    return Measured(result, error, max(python_peak, 0) + arrow_peak)


def _arrow_proxy_pool() -> tuple[Any, Any]:
    try:
        import pyarrow as pa
    except ImportError:
        return None, None
    previous = pa.default_memory_pool()
    pool = pa.proxy_memory_pool(previous)
    _ARROW_POOLS.append(pool)
    pa.set_memory_pool(pool)
    return pool, previous


# --- bombs -------------------------------------------------------------------------------------


def _fits_header(cards: dict[str, Any]) -> bytes:
    lines = []
    for key, value in cards.items():
        shown = ("T" if value else "F") if isinstance(value, bool) else str(value)
        lines.append(f"{key:<8}= {shown:>20}".ljust(80))
    lines.append("END".ljust(80))
    text = "".join(lines).encode("ascii")
    return text + b" " * (-len(text) % 2880)


def _gzip_stream(path: Path, parts: Iterable[bytes]) -> None:
    with path.open("wb") as handle, gzip.GzipFile(fileobj=handle, mode="wb", mtime=0) as packed:
        for part in parts:
            packed.write(part)


def _zeros(count: int) -> Iterator[bytes]:
    while count > 0:
        yield _ZERO_CHUNK[: min(count, MIB)]
        count -= MIB


def fits_gz_zeros(folder: Path, expanded_bytes: int) -> Bomb:
    """A LAMOST-style (5, N) float32 primary image of zeros, gzipped."""
    pixels = max(expanded_bytes // 20, 1)
    header = _fits_header(
        {"SIMPLE": True, "BITPIX": -32, "NAXIS": 2, "NAXIS1": pixels, "NAXIS2": 5}
    )
    path = folder / "spec-zeros.fits.gz"
    _gzip_stream(path, [header, *_zeros(pixels * 20 + (-pixels * 20 % 2880))])
    return Bomb("fits.gz of zeros", path, len(header) + pixels * 20)


def csv_gz_rows(folder: Path, rows: int, row: bytes = b"4000.0,1.0\n") -> Bomb:
    """A CSV of one repeated row, gzipped."""
    block = row * (MIB // len(row))
    per_block = MIB // len(row)
    path = folder / "table.csv.gz"

    def parts() -> Iterator[bytes]:
        yield b"wavelength,flux\n"
        left = rows
        while left > 0:
            take = min(left, per_block)
            yield block if take == per_block else row * take
            left -= take

    _gzip_stream(path, parts())
    return Bomb("csv.gz of many rows", path, 16 + rows * len(row))


def npy_header(shape: tuple[int, ...], descr: str = "<f8") -> bytes:
    text = f"{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape!r}, }}"
    body = text.encode("latin-1")
    padding = -(10 + len(body) + 1) % 64
    body += b" " * padding + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(body)) + body


def write_zip(path: Path, members: list[tuple[str, Iterable[bytes], int | None]]) -> None:
    """A ZIP of deflated members; a member's third item, when not None, is the size (and the
    CRC of that many bytes) its headers declare instead of the real ones."""
    directory = []
    with path.open("wb") as handle:
        for name, parts, declared in members:
            offset = handle.tell()
            encoded = name.encode()
            handle.write(b"\0" * (30 + len(encoded)))
            packer = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
            size = compressed = crc = declared_crc = 0
            for part in parts:
                if declared is not None and size < declared:
                    declared_crc = zlib.crc32(part[: declared - size], declared_crc)
                crc = zlib.crc32(part, crc)
                size += len(part)
                data = packer.compress(part)
                compressed += len(data)
                handle.write(data)
            tail = packer.flush()
            compressed += len(tail)
            handle.write(tail)
            shown_size, shown_crc = (size, crc) if declared is None else (declared, declared_crc)
            fields = (20, 0, 8, 0, 0, shown_crc, compressed, shown_size, len(encoded), 0)
            end = handle.tell()
            handle.seek(offset)
            handle.write(struct.pack("<4s5H3L2H", b"PK\x03\x04", *fields) + encoded)
            handle.seek(end)
            directory.append((encoded, fields, offset))
        start = handle.tell()
        for encoded, fields, offset in directory:
            handle.write(
                struct.pack("<4s6H3L5HLL", b"PK\x01\x02", 20, *fields, 0, 0, 0, 0, offset) + encoded
            )
        size = handle.tell() - start
        count = len(directory)
        handle.write(struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, count, count, size, start, 0))


def npz_zeros(folder: Path, values: int) -> Bomb:
    """An NPZ whose flux is ``values`` float64 zeros, deflated."""
    path = folder / "table.npz"
    wavelength = npy_header((3,)) + np.array([4000.0, 4001.0, 4002.0]).tobytes()
    flux = [npy_header((values,)), *_zeros(values * 8)]
    write_zip(path, [("wavelength.npy", [wavelength], None), ("flux.npy", flux, None)])
    return Bomb("npz of a huge zero array", path, len(wavelength) + len(flux[0]) + values * 8)


def npz_lying_member(folder: Path, hidden_bytes: int) -> Bomb:
    """An NPZ whose flux member declares 3 values but inflates to ``hidden_bytes`` more."""
    path = folder / "lying.npz"
    wavelength = npy_header((3,)) + np.array([4000.0, 4001.0, 4002.0]).tobytes()
    flux_head = npy_header((3,)) + np.ones(3).tobytes()
    flux = [flux_head, *_zeros(hidden_bytes)]
    write_zip(path, [("wavelength.npy", [wavelength], None), ("flux.npy", flux, len(flux_head))])
    return Bomb("npz member lying about its size", path, len(flux_head) + hidden_bytes)


def parquet_long_row(folder: Path, values: int) -> Bomb:
    """A SpecVI-Bench parquet row whose wavelength and flux lists hold ``values`` zeros each."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    zeros = pa.array(np.zeros(values))
    listed = pa.ListArray.from_arrays(pa.array([0, values], type=pa.int32()), zeros)
    create_kwargs = pa.StructArray.from_arrays([listed, listed], names=["wavelength", "flux"])
    tool = pa.StructArray.from_arrays([create_kwargs], names=["create_kwargs"])
    tools = pa.StructArray.from_arrays([tool], names=["spectral_visualization_tool"])
    extra = pa.StructArray.from_arrays([tools], names=["tools_kwargs"])
    table = pa.table({"data_source": pa.array(["specvi-mini-cv"]), "extra_info": extra})
    path = folder / "train_cv.parquet"
    pq.write_table(table, path, compression="zstd")
    return Bomb("parquet row of a huge list", path, 2 * values * 8)


def parquet_many_rows(folder: Path, rows: int) -> Bomb:
    """A SpecVI-Bench parquet of ``rows`` two-pixel spectra."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    offsets = pa.array(np.arange(rows + 1, dtype=np.int32) * 2)
    values = pa.array(np.tile([4000.0, 4001.0], rows))
    listed = pa.ListArray.from_arrays(offsets, values)
    create_kwargs = pa.StructArray.from_arrays([listed, listed], names=["wavelength", "flux"])
    tool = pa.StructArray.from_arrays([create_kwargs], names=["create_kwargs"])
    tools = pa.StructArray.from_arrays([tool], names=["spectral_visualization_tool"])
    extra = pa.StructArray.from_arrays([tools], names=["tools_kwargs"])
    table = pa.table({"data_source": pa.array(["specvi-mini-cv"] * rows), "extra_info": extra})
    path = folder / "test_cv.parquet"
    pq.write_table(table, path, compression="zstd")
    return Bomb("parquet of many rows", path, 2 * rows * 2 * 8)


def build_bombs(folder: Path, scale: float = 1.0) -> list[Bomb]:
    """The bombs of issue 11 at ``scale`` (1.0: the sizes reported there)."""
    return [
        fits_gz_zeros(folder, int(400e6 * scale)),
        csv_gz_rows(folder, int(70e6 * scale)),
        npz_zeros(folder, int(125e6 * scale)),
        npz_lying_member(folder, int(1e9 * scale)),
        parquet_long_row(folder, int(16e6 * scale)),
        parquet_many_rows(folder, int(1_000_000 * scale)),
    ]


# --- the report --------------------------------------------------------------------------------


def run_bomb_benchmark(limit_bytes: int = 64 * MIB, scale: float = 1.0) -> dict[str, Any]:
    limits = ReadLimits(max_uncompressed_bytes=limit_bytes)
    rows = []
    with tempfile.TemporaryDirectory(prefix="specvet-bombs-") as tmp:
        for bomb in build_bombs(Path(tmp), scale):
            measured = measure_peak(partial(load_spectra, bomb.path, limits=limits))
            error = measured.error
            if error is not None and not isinstance(error, SpectrumFormatError):
                raise error
            rows.append(
                {
                    "bomb": bomb.name,
                    "file_bytes": bomb.path.stat().st_size,
                    "expanded_bytes": bomb.expanded_bytes,
                    "limit_bytes": limit_bytes,
                    "peak_bytes": measured.peak_bytes,
                    "refused": error is not None,
                    "message": str(error).replace(tmp + "/", "") if error else "read",
                }
            )
    return {"limit_bytes": limit_bytes, "scale": scale, "rows": rows}


def format_bomb_report(summary: dict[str, Any]) -> str:
    lines = [
        f"load_spectra on decompression bombs, limit {summary['limit_bytes'] / MIB:g} MiB "
        f"(scale {summary['scale']:g}); peak = tracemalloc + Arrow pool"
    ]
    lines.append(
        f"{'bomb':<34}{'file':>11}{'expands to':>14}{'limit':>11}{'peak':>11}{'peak/limit':>12}"
    )
    for row in summary["rows"]:
        lines.append(
            f"{row['bomb']:<34}{_size(row['file_bytes']):>11}{_size(row['expanded_bytes']):>14}"
            f"{_size(row['limit_bytes']):>11}{_size(row['peak_bytes']):>11}"
            f"{row['peak_bytes'] / row['limit_bytes']:>12.2f}"
        )
        lines.append(f"    {'refused' if row['refused'] else 'READ'}: {row['message'][:150]}")
    return "\n".join(lines)


def _size(count: int) -> str:
    for unit, factor in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= factor:
            return f"{count / factor:.1f} {unit}"
    return f"{count} B"
