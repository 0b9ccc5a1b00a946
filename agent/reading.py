"""Reading untrusted spectrum files within limits: decompression, ZIP/NPZ members, FITS headers.

Sizes are counted as the bytes come out of the decompressor, never taken from a header: a gzip
trailer, a ZIP directory, an NPY header and a FITS header can all lie, and a few kilobytes of
any of them can expand to gigabytes. Plain Python: the web app fills ``ReadLimits`` from its
settings (named in ``LIMIT_SETTINGS``) and passes them to ``load_spectra``.
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import math
import os
import re
import struct
import sys
import zipfile
import zlib
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, cast

import numpy as np

if TYPE_CHECKING:
    from _typeshed import SupportsRead

MIB = 1024 * 1024
CHUNK_BYTES = MIB
HEAD_BYTES = 4096


class SpectrumFormatError(ValueError):
    """A file or row that cannot be read as a spectrum. The message names the input and why."""


class SpectrumTooLarge(SpectrumFormatError):
    """A file refused because reading it would pass one of its ``ReadLimits``."""


@dataclass(frozen=True)
class ReadLimits:
    """What reading one file may cost.

    ``max_uncompressed_bytes`` bounds the file's content once decompressed (and the numbers
    parsed from a text table); ``max_pixels`` the pixels (table rows) of one spectrum;
    ``max_spectra`` the spectra (rows, targets) in one file.
    """

    max_uncompressed_bytes: int = 64 * MIB
    max_pixels: int = 1_000_000
    max_spectra: int = 5_000

    def __post_init__(self) -> None:
        for name in LIMIT_SETTINGS:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"ReadLimits.{name} must be a positive integer; got {value!r}")


LIMIT_SETTINGS = {
    "max_uncompressed_bytes": "SPECTRUM_MAX_UNCOMPRESSED_BYTES",
    "max_pixels": "SPECTRUM_MAX_PIXELS",
    "max_spectra": "SPECTRUM_MAX_SPECTRA_PER_FILE",
}


def over_limit(source: str, what: str, limits: ReadLimits, name: str) -> SpectrumTooLarge:
    """The refusal of ``source``: what it holds, the limit, and the setting that raises it."""
    value = getattr(limits, name)
    shown = f"{value} bytes ({value / MIB:.4g} MiB)" if name == "max_uncompressed_bytes" else value
    return SpectrumTooLarge(
        f"{source}: {what}; the limit is {shown}. To read it, raise {LIMIT_SETTINGS[name]} "
        f"(ReadLimits.{name})"
    )


def _too_many_bytes(source: str, limits: ReadLimits) -> SpectrumTooLarge:
    return over_limit(
        source,
        f"more than {limits.max_uncompressed_bytes} bytes once decompressed",
        limits,
        "max_uncompressed_bytes",
    )


# --- one file's content --------------------------------------------------------------------------

_GZIP_MAGIC = b"\x1f\x8b"
_BZIP2_MAGIC = re.compile(rb"BZh[1-9](?:1AY&SY|\x17rE8P\x90)")
_XZ_MAGIC = b"\xfd7zXZ\x00"
_DECOMPRESSION_ERRORS = (OSError, EOFError, zlib.error, lzma.LZMAError)


def _compression(magic: bytes) -> str | None:
    if magic.startswith(_GZIP_MAGIC):
        return "gzip"
    if _BZIP2_MAGIC.match(magic):
        return "bzip2"
    if magic.startswith(_XZ_MAGIC):
        return "xz"
    return None


class _XzReader:
    """An xz stream read ``size`` bytes at a time, its decoder held to ``memlimit`` bytes.

    lzma.LZMAFile cannot take a memory limit, and the dictionary an xz file asks for (up to
    1.5 GiB) is allocated before a single byte comes out.
    """

    def __init__(self, handle: IO[bytes], memlimit: int) -> None:
        self._handle = handle
        self._memlimit = memlimit
        self._decoder = lzma.LZMADecompressor(memlimit=memlimit)
        self._done = False

    def read(self, size: int) -> bytes:
        while not self._done:
            if self._decoder.eof:
                rest = self._decoder.unused_data or self._handle.read(CHUNK_BYTES)
                if not rest:
                    self._done = True
                    break
                self._decoder = lzma.LZMADecompressor(memlimit=self._memlimit)
                try:
                    data = self._decoder.decompress(rest, size)
                except lzma.LZMAError:  # trailing bytes that are no xz stream, as LZMAFile
                    self._done = True
                    break
            else:
                raw = self._handle.read(CHUNK_BYTES) if self._decoder.needs_input else b""
                if not raw and self._decoder.needs_input:
                    raise EOFError("xz stream ended before its end-of-stream marker")
                data = self._decoder.decompress(raw, size)
            if data:
                return data
        return b""


class FileContent(io.RawIOBase):
    """The (decompressed) bytes of one file, of which at most ``max_uncompressed_bytes`` are read.

    ``head`` holds the first bytes for format detection; reading starts again at byte 0.
    """

    def __init__(
        self,
        stream: IO[bytes] | gzip.GzipFile | _XzReader,
        *,
        source: str,
        limits: ReadLimits,
        compression: str | None,
    ) -> None:
        super().__init__()
        self._stream = stream
        self._source = source
        self._limits = limits
        self.compression = compression
        self.count = 0  # bytes that came out of the stream so far
        # Small reads under a small limit, so that a refusal never holds much past the limit.
        self._chunk = max(HEAD_BYTES, min(CHUNK_BYTES, limits.max_uncompressed_bytes // 16))
        self._pending = b""
        head: list[bytes] = []
        size = 0
        while size < HEAD_BYTES and (chunk := self._next(HEAD_BYTES - size)):
            head.append(chunk)
            size += len(chunk)
        self.head = b"".join(head)
        self._pending = self.head

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self._next(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def read_all(self) -> bytes:
        """Every byte, or SpectrumTooLarge as soon as there are more than the limit allows."""
        # BytesIO grows its buffer in place and getvalue() hands that same buffer over, where
        # joining a list of chunks would hold the content twice.
        buffer = io.BytesIO()
        while chunk := self._next(self._chunk):
            buffer.write(chunk)
        return buffer.getvalue()

    def _next(self, size: int) -> bytes:
        if self._pending:
            data, self._pending = self._pending[:size], self._pending[size:]
            return data
        try:
            data = self._stream.read(min(size, self._chunk))
        except lzma.LZMAError as exc:
            if "memory" not in str(exc).lower():
                raise SpectrumFormatError(
                    f"{self._source}: truncated or corrupt xz data ({exc})"
                ) from exc
            raise over_limit(
                self._source,
                f"its xz dictionary needs more than {self._limits.max_uncompressed_bytes // 2} "
                "bytes of memory to decompress",
                self._limits,
                "max_uncompressed_bytes",
            ) from exc
        except _DECOMPRESSION_ERRORS as exc:
            kind = self.compression or "file"
            raise SpectrumFormatError(
                f"{self._source}: truncated or corrupt {kind} data ({exc})"
            ) from exc
        self.count += len(data)
        if self.count > self._limits.max_uncompressed_bytes:
            raise _too_many_bytes(self._source, self._limits)
        return data


@contextmanager
def open_content(path: Path, source: str, limits: ReadLimits) -> Iterator[FileContent]:
    """The content of ``path``, decompressed (gzip, bzip2, xz) on the fly and within ``limits``."""
    with ExitStack() as stack:
        try:
            handle = stack.enter_context(path.open("rb"))
            magic = handle.read(16)
            handle.seek(0)
            size = os.fstat(handle.fileno()).st_size
        except FileNotFoundError as exc:
            raise SpectrumFormatError(f"{source}: no such file") from exc
        except OSError as exc:
            raise SpectrumFormatError(f"{source}: cannot be read ({exc.strerror or exc})") from exc
        if not magic:
            raise SpectrumFormatError(f"{source}: empty file, not a spectrum file")
        compression = _compression(magic)
        stream: IO[bytes] | gzip.GzipFile | _XzReader = handle
        if compression is None and size > limits.max_uncompressed_bytes:
            raise over_limit(source, f"{size} bytes in one file", limits, "max_uncompressed_bytes")
        if compression == "gzip":
            stream = stack.enter_context(gzip.GzipFile(fileobj=handle, mode="rb"))
        elif compression == "bzip2":
            stream = stack.enter_context(bz2.BZ2File(handle, mode="rb"))
        elif compression == "xz":
            # Half the byte limit for the xz dictionary, the other half for the content.
            stream = _XzReader(handle, memlimit=limits.max_uncompressed_bytes // 2)
        content = FileContent(stream, source=source, limits=limits, compression=compression)
        if not content.head:
            raise SpectrumFormatError(f"{source}: empty file ({compression} holds no data)")
        yield content


# --- ZIP members ---------------------------------------------------------------------------------

_LOCAL_HEADER = struct.Struct("<4s2B4HL2L2H")
_LOCAL_MAGIC = b"PK\x03\x04"
_END_MAGIC = b"PK\x05\x06"
_END_RECORD = struct.Struct("<4s4H2LH")
_ZIP64_LOCATOR = struct.Struct("<4sLQL")
_ZIP64_END = struct.Struct("<4sQ2H2L4Q")


class UnsafeArchive(ValueError):
    """A ZIP archive or member that cannot be read safely; the message says where and why."""


class ArchiveTooLarge(UnsafeArchive):
    """A ZIP member (or archive) that would unpack to more bytes than allowed."""


def check_zip_directory(
    raw: bytes, *, where: str, max_members: int, max_directory_bytes: int
) -> None:
    """Refuse an archive whose central directory is too big to parse (before zipfile parses it).

    zipfile builds a Python object per directory entry, about ten times the entry's size.
    """
    start = raw.rfind(_END_MAGIC, max(0, len(raw) - _END_RECORD.size - 65535))
    if start < 0 or len(raw) - start < _END_RECORD.size:
        raise UnsafeArchive(f"{where}: not a ZIP archive (no end of central directory record)")
    record = _END_RECORD.unpack_from(raw, start)
    entries, directory_bytes = record[4], record[5]
    locator_at = start - _ZIP64_LOCATOR.size
    if locator_at >= 0 and raw[locator_at : locator_at + 4] == b"PK\x06\x07":
        offset = _ZIP64_LOCATOR.unpack_from(raw, locator_at)[2]
        if offset + _ZIP64_END.size <= len(raw) and raw[offset : offset + 4] == b"PK\x06\x06":
            zip64 = _ZIP64_END.unpack_from(raw, offset)
            entries, directory_bytes = zip64[7], zip64[8]
    if entries > max_members:
        raise UnsafeArchive(f"{where}: {entries} members in one archive; at most {max_members}")
    if directory_bytes > max_directory_bytes:
        raise UnsafeArchive(
            f"{where}: a central directory of {directory_bytes} bytes; at most "
            f"{max_directory_bytes}"
        )


def iter_zip_member(
    raw: bytes, info: zipfile.ZipInfo, *, where: str, budget: int
) -> Iterator[bytes]:
    """The member's bytes in chunks, counted as they are inflated.

    Refused: more than ``budget`` bytes (ArchiveTooLarge), more or fewer bytes than the directory
    declares, a CRC mismatch, encryption, and compression methods other than stored and deflated
    (bzip2 and LZMA members inflate a whole block per call, so they cannot be bounded).
    """
    name = f"{where} member {info.filename!r}"
    if info.flag_bits & 0x1:
        raise UnsafeArchive(f"{name} is encrypted")
    if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        raise UnsafeArchive(
            f"{name} uses compression method {info.compress_type}; only stored or deflated "
            "members are read"
        )
    if info.file_size > budget:
        raise ArchiveTooLarge(f"{name} declares {info.file_size} bytes; at most {budget} allowed")
    header = raw[info.header_offset : info.header_offset + _LOCAL_HEADER.size]
    if len(header) != _LOCAL_HEADER.size or not header.startswith(_LOCAL_MAGIC):
        raise UnsafeArchive(f"{name}: bad local file header")
    fields = _LOCAL_HEADER.unpack(header)
    start = info.header_offset + _LOCAL_HEADER.size + fields[10] + fields[11]
    data = memoryview(raw)[start : start + info.compress_size]
    if len(data) != info.compress_size:
        raise UnsafeArchive(f"{name} is truncated")
    produced = 0
    crc = 0
    step = max(HEAD_BYTES, min(CHUNK_BYTES, budget // 16))
    for chunk in _member_chunks(data, info.compress_type, name, step):
        produced += len(chunk)
        if produced > min(info.file_size, budget):
            if produced > budget:
                raise ArchiveTooLarge(f"{name} unpacks to more than {budget} bytes")
            raise UnsafeArchive(
                f"{name} unpacks to more than the {info.file_size} bytes its header declares"
            )
        crc = zlib.crc32(chunk, crc)
        yield chunk
    if produced != info.file_size:
        raise UnsafeArchive(
            f"{name} unpacks to {produced} bytes; its header declares {info.file_size}"
        )
    if crc != info.CRC:
        raise UnsafeArchive(f"{name}: CRC mismatch (damaged data)")


def _member_chunks(data: memoryview, method: int, name: str, step: int) -> Iterator[bytes]:
    if method == zipfile.ZIP_STORED:
        for offset in range(0, len(data), step):
            yield bytes(data[offset : offset + step])
        return
    inflater = zlib.decompressobj(-zlib.MAX_WBITS)
    pending: bytes | memoryview = b""
    position = 0
    while not inflater.eof:
        if not pending:
            if position >= len(data):
                raise UnsafeArchive(f"{name}: the deflate stream ends early (truncated)")
            pending = data[position : position + step]
            position += len(pending)
        try:
            chunk = inflater.decompress(pending, step)
        except zlib.error as exc:
            raise UnsafeArchive(f"{name}: corrupt deflate data ({exc})") from exc
        pending = inflater.unconsumed_tail
        if chunk:
            yield chunk


# --- NPZ -----------------------------------------------------------------------------------------

_NPY_MAGIC = b"\x93NUMPY"
MAX_NPZ_MEMBERS = 256
_MAX_NPZ_DIRECTORY_BYTES = 1 * MIB
_NPZ_READ_ERRORS = (ValueError, OSError, EOFError, KeyError, NotImplementedError, RuntimeError)


class _ChunkReader:
    """A file-like ``read(n)`` over an iterator of chunks (for numpy's NPY header reader)."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self._chunks = chunks
        self._buffer = b""

    def read(self, size: int) -> bytes:
        while len(self._buffer) < size:
            chunk = next(self._chunks, None)
            if chunk is None:
                break
            self._buffer += chunk
        data, self._buffer = self._buffer[:size], self._buffer[size:]
        return data

    def readinto_all(self, target: bytearray) -> int:
        """Fill ``target``; return how many bytes there were."""
        filled = min(len(self._buffer), len(target))
        target[:filled] = self._buffer[:filled]
        self._buffer = self._buffer[filled:]
        while filled < len(target):
            chunk = next(self._chunks, None)
            if chunk is None:
                break
            take = min(len(chunk), len(target) - filled)
            target[filled : filled + take] = chunk[:take]
            self._buffer = chunk[take:]
            filled += take
        return filled

    def at_end(self) -> bool:
        """True when nothing is left (reading on so the member's size and CRC get checked)."""
        leftover = len(self._buffer)
        for chunk in self._chunks:
            leftover += len(chunk)
        return leftover == 0


def read_npz(raw: bytes, source: str, limits: ReadLimits | None) -> dict[str, Any]:
    """Every member of an NPZ archive, as ``np.load`` names them (``.npy`` dropped).

    Arrays are built only after their NPY header's shape fits the limits and agrees with the
    member's declared size; the data is then counted while it is inflated. ``limits=None``
    reads our own stored spectra, which were checked on the way in.
    """
    budget = sys.maxsize if limits is None else limits.max_uncompressed_bytes
    try:
        check_zip_directory(
            raw,
            where=source,
            max_members=MAX_NPZ_MEMBERS,
            max_directory_bytes=_MAX_NPZ_DIRECTORY_BYTES,
        )
        with zipfile.ZipFile(io.BytesIO(raw)) as archive:
            members = archive.infolist()
        declared = sum(member.file_size for member in members)
        if limits is not None and declared > budget:
            raise _too_many_bytes(source, limits)
        arrays: dict[str, Any] = {}
        for member in members:
            key = member.filename.removesuffix(".npy")
            chunks = iter_zip_member(raw, member, where=source, budget=budget)
            arrays[key] = _read_member(_ChunkReader(chunks), member, key, source, limits)
            budget -= member.file_size
        return arrays
    except ArchiveTooLarge as exc:
        assert limits is not None
        raise _too_many_bytes(source, limits) from exc
    except SpectrumFormatError:
        raise
    except UnsafeArchive as exc:
        raise SpectrumFormatError(f"{exc} (not a readable NPZ archive)") from exc
    except (zipfile.BadZipFile, zlib.error, struct.error, *_NPZ_READ_ERRORS) as exc:
        raise SpectrumFormatError(f"{source}: not a readable NPZ archive ({exc})") from exc


def _read_member(
    reader: _ChunkReader, member: zipfile.ZipInfo, key: str, source: str, limits: ReadLimits | None
) -> Any:
    magic = reader.read(len(_NPY_MAGIC))
    if magic != _NPY_MAGIC:  # np.load hands such members over as bytes
        rest = bytearray(max(member.file_size - len(magic), 0))
        reader.readinto_all(rest)
        reader.at_end()
        return magic + bytes(rest)
    version = reader.read(2)
    if len(version) != 2:
        raise SpectrumFormatError(f"{source}: array {key!r} is truncated")
    header_reader = _Prefixed(magic + version, reader)
    # numpy only ever calls read(n), which _Prefixed has.
    header = cast("SupportsRead[bytes]", header_reader)
    fmt = np.lib.format
    fmt.read_magic(header)
    if version == b"\x01\x00":
        shape, fortran, dtype = fmt.read_array_header_1_0(header)
    elif version == b"\x02\x00":
        shape, fortran, dtype = fmt.read_array_header_2_0(header)
    else:
        raise SpectrumFormatError(
            f"{source}: array {key!r} uses NPY version {version[0]}.{version[1]}; "
            "1.0 and 2.0 are read"
        )
    if dtype.hasobject:
        raise SpectrumFormatError(f"{source}: array {key!r} holds Python objects; not read")
    count = math.prod(shape)
    if limits is not None and count > limits.max_pixels:
        raise over_limit(source, f"array {key!r} has {count} values", limits, "max_pixels")
    size = count * dtype.itemsize
    if header_reader.consumed + size != member.file_size:
        raise SpectrumFormatError(
            f"{source}: array {key!r} says {size} bytes of data but its member holds "
            f"{member.file_size - header_reader.consumed}"
        )
    data = bytearray(size)
    if reader.readinto_all(data) != size or not reader.at_end():
        raise SpectrumFormatError(f"{source}: array {key!r} is truncated")
    array = np.frombuffer(data, dtype=dtype) if size else np.empty(count, dtype=dtype)
    if fortran:
        return array.reshape(shape[::-1]).transpose()
    return array.reshape(shape)


class _Prefixed:
    """``read(n)`` that first returns ``prefix`` (the bytes already taken for the magic)."""

    def __init__(self, prefix: bytes, reader: _ChunkReader) -> None:
        self._prefix = prefix
        self._reader = reader
        self.consumed = 0

    def read(self, size: int) -> bytes:
        data, self._prefix = self._prefix[:size], self._prefix[size:]
        if len(data) < size:
            data += self._reader.read(size - len(data))
        self.consumed += len(data)
        return data


# --- FITS ----------------------------------------------------------------------------------------

FITS_BLOCK = 2880
FITS_CARD = 80
MAX_FITS_HDUS = 1000
MAX_FITS_HEADER_CARDS = 100_000
_KEYWORD_CHARS = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")
_SIZE_KEYS = re.compile(rb"Z?(?:BITPIX|NAXIS\d*)|PCOUNT|GCOUNT|ZIMAGE")


def check_fits_structure(raw: bytes, source: str, limits: ReadLimits) -> None:
    """Walk the headers without astropy, which builds an object per header card and inflates
    tile-compressed images to the size their header declares.

    Refused: more than MAX_FITS_HDUS HDUs or MAX_FITS_HEADER_CARDS cards, and content plus
    compressed images that would inflate past ``max_uncompressed_bytes``. Anything this walk does
    not understand is left to astropy, which reports damaged files.
    """
    offset = 0
    hdus = 0
    cards = 0
    inflated = 0
    while offset < len(raw):
        hdus += 1
        if hdus > MAX_FITS_HDUS:
            raise SpectrumFormatError(
                f"{source}: not a spectrum file: more than {MAX_FITS_HDUS} HDUs"
            )
        keys, end, cards = _fits_header(raw, offset, cards, source)
        if end is None:
            return
        sizes = _fits_sizes(keys)
        if sizes is None:
            return
        data_bytes, image_bytes = sizes
        inflated += image_bytes
        if len(raw) + inflated > limits.max_uncompressed_bytes:
            raise over_limit(
                source,
                f"a compressed image that inflates to {image_bytes} bytes",
                limits,
                "max_uncompressed_bytes",
            )
        header_end = offset + _blocks(end - offset)
        offset = header_end + _blocks(data_bytes)


def _fits_header(
    raw: bytes, offset: int, cards: int, source: str
) -> tuple[dict[bytes, bytes], int | None, int]:
    keys: dict[bytes, bytes] = {}
    position = offset
    while position + FITS_CARD <= len(raw):
        card = raw[position : position + FITS_CARD]
        position += FITS_CARD
        cards += 1
        if cards > MAX_FITS_HEADER_CARDS:
            raise SpectrumFormatError(
                f"{source}: not a spectrum file: more than {MAX_FITS_HEADER_CARDS} header cards"
            )
        if card.startswith(b"END"):
            rest = card[3:].lstrip(b" ")
            if not rest or rest[0] not in _KEYWORD_CHARS:
                return keys, position, cards
        keyword = card[:8].rstrip(b" ")
        if card[8:10] == b"= " and _SIZE_KEYS.fullmatch(keyword):
            keys.setdefault(keyword, card[10:].split(b"/", 1)[0].strip())
    return keys, None, cards


def _fits_sizes(keys: dict[bytes, bytes]) -> tuple[int, int] | None:
    """(bytes of the data unit, bytes of the image it inflates to) or None if not understood."""
    try:
        bitpix = int(keys[b"BITPIX"])
        axes = [int(keys[b"NAXIS%d" % n]) for n in range(1, int(keys[b"NAXIS"]) + 1)]
        pcount = int(keys.get(b"PCOUNT", b"0"))
        gcount = int(keys.get(b"GCOUNT", b"1"))
        image = 0
        if keys.get(b"ZIMAGE") == b"T":
            zaxes = [int(keys[b"ZNAXIS%d" % n]) for n in range(1, int(keys[b"ZNAXIS"]) + 1)]
            image = abs(int(keys[b"ZBITPIX"])) // 8 * math.prod(zaxes)
    except (KeyError, ValueError):
        return None
    if any(axis < 0 for axis in axes) or pcount < 0 or gcount < 0 or image < 0:
        return None
    if not axes:
        return 0, image
    if axes[0] == 0 and len(axes) > 1:  # random groups
        axes = axes[1:]
    return abs(bitpix) // 8 * gcount * (pcount + math.prod(axes)), image


def _blocks(size: int) -> int:
    return -(-size // FITS_BLOCK) * FITS_BLOCK


# --- parquet -------------------------------------------------------------------------------------


def check_parquet_metadata(
    metadata: Any, columns: list[str], source: str, limits: ReadLimits
) -> None:
    """Refuse from the footer alone: too many rows, or columns that hold too much.

    The footer can lie; the reader still counts what it decodes batch by batch.
    """
    if metadata.num_rows > limits.max_spectra:
        raise over_limit(
            source, f"{metadata.num_rows} rows (spectra) in one file", limits, "max_spectra"
        )
    values = 0
    stored = 0
    for group in range(metadata.num_row_groups):
        row_group = metadata.row_group(group)
        for index in range(row_group.num_columns):
            column = row_group.column(index)
            if column.path_in_schema.split(".", 1)[0] in columns:
                values += column.num_values
                stored += column.total_uncompressed_size
    if max(values * 8, stored) > limits.max_uncompressed_bytes:
        raise over_limit(
            source,
            f"its columns hold {values} values ({max(values * 8, stored)} bytes) once decoded",
            limits,
            "max_uncompressed_bytes",
        )
