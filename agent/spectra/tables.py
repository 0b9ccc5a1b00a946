"""Plain text tables: CSV and whitespace ASCII with column names, units and directives."""

from __future__ import annotations

import csv
import io
import re
from array import array as packed_array
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from astropy import units

from agent.reading import FileContent, ReadLimits, SpectrumFormatError, SpectrumTooLarge, over_limit
from agent.resolution import Resolution, ResolutionError, parse_user_value
from agent.spectra import magnitudes
from agent.spectra.value import (
    Spectrum,
    _check_lengths,
    _check_wavelength_values,
    _finish,
    air_to_vacuum,
    frame_meta,
    validate_arrays,
)

_WAVELENGTH_NAMES = frozenset({"wave", "wavelength", "lambda", "lam", "wl", "wavelen"})
_FLUX_NAMES = frozenset({"flux", "f", "fl", "flam", "flux_density"})
_ERROR_NAMES = frozenset(
    {
        "error",
        "err",
        "sigma",
        "flux_err",
        "flux_error",
        "uncertainty",
        "unc",
        "e",
        "flux_sigma",
        "noise",
    }
)
_IVAR_NAMES = frozenset({"ivar", "inverse_variance", "invvar", "flux_ivar"})
_MASK_NAMES = frozenset({"mask", "and_mask", "andmask", "bad"})
_FRAME_SUFFIXES = {"_air": "air", "_vac": "vacuum", "_vacuum": "vacuum"}
_ANGSTROM_SPELLINGS = frozenset({"a", "aa", "å", "angstrom", "angstroms", "ang", "angs"})
_UNIT_KEYS = frozenset({"wavelength_unit", "wave_unit", "wavelength_units", "unit_wavelength"})
_FRAME_KEYS = frozenset(
    {"wavelength_frame", "frame", "medium", "wavelength_medium", "air_or_vacuum"}
)
_DIRECTIVE_KEY = re.compile(r"[A-Za-z][\w ]*")
_CONTROL_BYTES = bytes(b for b in range(32) if b not in b"\t\n\v\f\r")
_LINE_BREAKS = "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"  # where str.splitlines splits
_MAX_HEADER_CHARS = 10_000  # a table header line longer than this is not a table header
_MAX_LINE_CHARS = 100_000  # nor is any line longer than this a table row
_TEXT_CHUNK = 1 << 18  # characters decoded at a time


@dataclass(frozen=True)
class _ColumnSpec:
    # "wavelength" | "flux" | "ab_mag" | "error" | "ivar" | "mask" | "other", and "magnitude"
    # (magnitudes in no stated system: refused)
    role: str
    name: str
    unit: str | None
    frame: str | None


@dataclass
class _TableSettings:
    """What the comment lines (or NPZ scalar keys) say about the table."""

    wavelength_unit: str | None = None
    frame: str | None = None
    extra: dict[str, str] = field(default_factory=dict)


def _load_text(
    content: FileContent,
    source: str,
    limits: ReadLimits,
    declared_columns: tuple[str, ...] | None = None,
) -> list[Spectrum]:
    """A CSV or whitespace table, parsed line by line as it is decompressed.

    ``declared_columns`` (roles in file order, see agent.spectra.declared) replace the header.
    """
    if b"\x00" in content.head:
        raise _binary_content(source)
    settings = _TableSettings()
    comments: list[str] = []
    table: _TableRows | None = None
    lines = _TextLines(content, source, chunk=min(_TEXT_CHUNK, limits.max_uncompressed_bytes // 64))
    for number, line in lines:
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith("#"):
            comment = stripped.lstrip("#").strip()
            if table is None:
                comments.append(comment)
            _read_directive(comment, settings, source)
            continue
        if table is None:
            table = _TableRows.start(number, stripped, comments, source, limits, declared_columns)
        else:
            table.add(number, stripped)
    if lines.control > content.count // 100:
        raise _binary_content(source)
    if table is None:
        raise SpectrumFormatError(f"{source}: not a spectrum file: no data rows")
    ignored = [spec.name for spec in table.columns if spec.role == "other"]
    return [_table_spectrum(table.arrays(), table.columns, settings, source, ignored)]


def _binary_content(source: str) -> SpectrumFormatError:
    return SpectrumFormatError(
        f"{source}: not a spectrum file: binary content is not FITS, parquet, NPZ or gzip"
    )


class _TextLines:
    """The lines of a text file, numbered as ``str.splitlines`` numbers the whole text, read a
    chunk at a time. UTF-8, or Latin-1 for a line that is not; a UTF-8 byte order mark (Excel's
    "CSV UTF-8") is dropped. ``control`` counts the control characters read so far.
    """

    def __init__(self, content: FileContent, source: str, *, chunk: int) -> None:
        self.content = content
        self.source = source
        self.chunk = max(chunk, 4096)
        self.control = 0

    def __iter__(self) -> Iterator[tuple[int, str]]:
        reader = io.TextIOWrapper(
            io.BufferedReader(self.content),
            encoding="utf-8",
            errors="surrogateescape",
            newline=None,
        )
        number = 0
        carry = ""
        chunk = reader.read(self.chunk).removeprefix("\ufeff")
        while True:
            self._check(chunk)
            text = carry + chunk
            lines = text.splitlines()
            carry = lines.pop() if chunk and lines and text[-1] not in _LINE_BREAKS else ""
            if len(carry) > _MAX_LINE_CHARS or any(len(line) > _MAX_LINE_CHARS for line in lines):
                raise SpectrumFormatError(
                    f"{self.source}: not a spectrum file: a line has more than "
                    f"{_MAX_LINE_CHARS} characters, too long for a table header or row"
                )
            if not text.isascii():
                lines = [piece for line in lines for piece in _decoded_line(line)]
            for line in lines:
                number += 1
                yield number, line
            if not chunk:
                return
            chunk = reader.read(self.chunk)

    def _check(self, chunk: str) -> None:
        if "\x00" in chunk:
            raise _binary_content(self.source)
        raw = chunk.encode("utf-8", "surrogateescape")
        self.control += len(raw) - len(raw.translate(None, _CONTROL_BYTES))


def _decoded_line(line: str) -> list[str]:
    """A line that is not UTF-8 read as Latin-1 (where NEL, 0x85, also ends a line)."""
    try:
        line.encode("utf-8")
    except UnicodeEncodeError:
        return line.encode("utf-8", "surrogateescape").decode("latin-1").splitlines() or [""]
    return [line]


def _read_directive(comment: str, settings: _TableSettings, source: str) -> None:
    separator = min((i for i in (comment.find(":"), comment.find("=")) if i >= 0), default=-1)
    key, value = comment[:separator].strip(), comment[separator + 1 :].strip()
    if separator < 0 or not value or not _DIRECTIVE_KEY.fullmatch(key):
        return
    key = key.lower().replace(" ", "_")
    if key in _FRAME_KEYS:
        settings.frame = _frame_name(value, source)
    elif key in _UNIT_KEYS:
        settings.wavelength_unit = value
    elif key in {"units", "unit"}:
        for part in re.split(r"[,;]\s*|\s+(?=\w+\s*=)", value):
            name, _, unit = part.partition("=")
            if unit and _role(_normalise_name(name)[0]) == "wavelength":
                settings.wavelength_unit = unit.strip()
            elif not unit and key == "unit":
                settings.wavelength_unit = name.strip()
    else:
        settings.extra[key] = value


def _frame_name(value: str, source: str) -> str:
    lowered = value.strip().strip("'\"").lower()
    if lowered in {"air"}:
        return "air"
    if lowered in {"vacuum", "vac"}:
        return "vacuum"
    raise SpectrumFormatError(f"{source}: wavelength frame {value!r} is neither 'air' nor 'vacuum'")


def _table_header(
    rows: list[tuple[int, str]], comments: list[str], delimiter: str | None, source: str
) -> tuple[list[_ColumnSpec], list[tuple[int, str]]]:
    first_tokens = _split_header(rows[0][1], delimiter)
    if not all(_is_number(token) for token in first_tokens):
        return _column_specs(first_tokens, source), rows[1:]
    width = len(_split_row(rows[0][1], delimiter))
    if comments:
        tokens = _split_header(comments[-1], delimiter)
        if len(tokens) == width and _role(_parse_column(tokens[0]).name) == "wavelength":
            return _column_specs(tokens, source), rows
    if width != 2:
        raise SpectrumFormatError(
            f"{source}: headerless table with {width} columns: which column is the flux and "
            "whether any is an uncertainty is not guessed. Name the columns in a header line "
            f"(e.g. 'wavelength flux error') or {_DECLARE_HINT}; an IRAF onedstds standard "
            "(wavelength, AB magnitude, bandpass) is 'wavelength,ab_mag,ignore'"
        )
    return _column_specs(["wavelength", "flux"], source, headerless=True), rows


_DECLARE_HINT = (
    "declare them on upload (form field 'Columns', API parameter 'columns', e.g. "
    "'wavelength,flux,error' or 'wavelength,flux,ignore')"
)
_DECLARE_WHERE = "on upload (form field 'Columns', API parameter 'columns')"
_DECLARE_AB_HINT = (
    "declare the columns on upload (form field 'Columns', API parameter 'columns') with the "
    "role 'ab_mag', e.g. 'wavelength,ab_mag' or 'wavelength,ab_mag,ignore'"
)


def _declared_header(
    rows: list[tuple[int, str]], declared: tuple[str, ...], delimiter: str | None, source: str
) -> tuple[list[_ColumnSpec], list[tuple[int, str]]]:
    """Columns as declared; a header line in the file, if any, is skipped."""
    first_tokens = _split_row(rows[0][1], delimiter)
    if len(first_tokens) != len(declared):
        raise SpectrumFormatError(
            f"{source}: {len(declared)} columns declared ({', '.join(declared)}), but line "
            f"{rows[0][0]} has {len(first_tokens)}"
        )
    specs = []
    for token in declared:
        name, unit = _split_unit(token)
        role = "other" if name == "ignore" else name
        specs.append(_ColumnSpec(role=role, name=f"{name} (declared)", unit=unit, frame=None))
    data = rows if all(_is_number(token) for token in first_tokens) else rows[1:]
    return specs, data


def _split_header(line: str, delimiter: str | None) -> list[str]:
    if delimiter:
        return [token.strip().strip("'\"") for token in next(csv.reader([line]))]
    tokens: list[str] = []
    for word in line.split():
        # "wavelength (micron)" and "wavelength [nm]": a bracketed unit belongs to the name before
        if tokens and (word[0] in "[(" or _unclosed_bracket(tokens[-1])):
            tokens[-1] = f"{tokens[-1]} {word}"
        else:
            tokens.append(word)
    return tokens


def _unclosed_bracket(token: str) -> bool:
    return token.count("(") + token.count("[") > token.count(")") + token.count("]")


def _split_row(line: str, delimiter: str | None) -> list[str]:
    return [token.strip() for token in line.split(delimiter)] if delimiter else line.split()


def _is_number(token: str) -> bool:
    try:
        float(token)
    except ValueError:
        return False
    return True


def _normalise_name(name: str) -> tuple[str, str | None]:
    lowered = name.strip().lower().replace(" ", "_").replace("-", "_")
    for suffix, frame in _FRAME_SUFFIXES.items():
        if lowered.endswith(suffix) and _role(lowered[: -len(suffix)]) == "wavelength":
            return lowered[: -len(suffix)], frame
    return lowered, None


def _role(name: str) -> str:
    for role, names in (
        ("wavelength", _WAVELENGTH_NAMES),
        ("flux", _FLUX_NAMES),
        ("ab_mag", magnitudes.AB_NAMES),
        ("magnitude", magnitudes.OTHER_MAGNITUDE_NAMES),
        ("error", _ERROR_NAMES),
        ("ivar", _IVAR_NAMES),
        ("mask", _MASK_NAMES),
    ):
        if name in names:
            return role
    return "other"


def _parse_column(token: str) -> _ColumnSpec:
    raw_name, unit = _split_unit(token)
    name, frame = _normalise_name(raw_name)
    role = _role(name)
    in_magnitudes = magnitudes.magnitude_unit(unit)
    if role in ("flux", "magnitude") and in_magnitudes:
        # "flux [mag(AB)]", "mag (AB)": the unit says which magnitudes
        role = "ab_mag" if in_magnitudes == "ab" else "magnitude"
    return _ColumnSpec(role=role, name=raw_name.strip(), unit=unit or None, frame=frame)


def _split_unit(token: str) -> tuple[str, str | None]:
    """'wavelength[nm]' / 'wavelength (micron)' -> (name, unit); a plain name has no unit."""
    stripped = token.strip()
    opening = min((i for i in (stripped.find("["), stripped.find("(")) if i > 0), default=-1)
    if opening < 0 or stripped[-1] not in "])":
        return stripped, None
    return stripped[:opening].strip(), stripped[opening + 1 : -1].strip() or None


def _column_specs(tokens: list[str], source: str, *, headerless: bool = False) -> list[_ColumnSpec]:
    specs = [_parse_column(token) for token in tokens]
    if headerless:
        specs = [_ColumnSpec(s.role, f"{s.name} (headerless)", s.unit, s.frame) for s in specs]
    _require_roles(specs, source)
    _check_error_unit(specs, source)
    return specs


def _check_error_unit(specs: list[_ColumnSpec], source: str) -> None:
    """An 'error' column in another unit than the flux is not the flux's uncertainty."""
    flux = next(spec for spec in specs if spec.role in ("flux", "ab_mag"))
    for spec in specs:
        if spec.role == "error" and flux.role == "ab_mag":
            if spec.unit and magnitudes.magnitude_unit(spec.unit) is None:
                raise SpectrumFormatError(
                    f"{source}: column {spec.name!r} is in {spec.unit!r}, the spectrum in AB "
                    "magnitudes: it is not read as the magnitudes' uncertainty. Rename it or "
                    f"{_DECLARE_HINT}"
                )
            continue
        if (
            spec.role == "error"
            and spec.unit
            and flux.unit
            and not _same_unit(spec.unit, flux.unit)
        ):
            raise SpectrumFormatError(
                f"{source}: column {spec.name!r} is in {spec.unit!r}, the flux in "
                f"{flux.unit!r}: it is not read as the flux's uncertainty. Rename it or "
                f"{_DECLARE_HINT}"
            )


def _same_unit(first: str, second: str) -> bool:
    if first.strip().lower() == second.strip().lower():
        return True
    try:
        return bool(units.Unit(first) == units.Unit(second))
    except (ValueError, TypeError):
        return False


def _require_roles(specs: list[_ColumnSpec], source: str) -> None:
    roles = [spec.role for spec in specs if spec.role != "other"]
    for spec in specs:
        if spec.role == "magnitude":
            if magnitudes.magnitude_unit(spec.unit):
                what, said = f"column {spec.name!r} in unit", str(spec.unit)
            else:
                what, said = "column", spec.name
            raise magnitudes.refuse_non_ab(said, source, what, _DECLARE_AB_HINT)
    if "flux" in roles and "ab_mag" in roles:
        raise SpectrumFormatError(
            f"{source}: both a flux and an AB-magnitude column: which one is the spectrum is not "
            f"guessed; {_DECLARE_HINT}"
        )
    if "ab_mag" in roles and "ivar" in roles:
        raise SpectrumFormatError(
            f"{source}: an inverse variance beside AB magnitudes is not read (of the magnitudes "
            "or of a flux?); give the magnitudes' 1-sigma error as an 'error' column instead"
        )
    flux_role = "ab_mag" if "ab_mag" in roles else "flux"
    for required, accepted in (("wavelength", _WAVELENGTH_NAMES), (flux_role, _FLUX_NAMES)):
        if required not in roles:
            raise SpectrumFormatError(
                f"{source}: missing column {required!r} (found {[s.name for s in specs]}; "
                f"accepted names: {sorted(accepted)}); rename it or {_DECLARE_HINT}"
            )
    repeated = sorted({role for role in roles if roles.count(role) > 1})
    if repeated:
        raise SpectrumFormatError(f"{source}: more than one column for {repeated}")


class _TableRows:
    """Data rows parsed as they stream in; only the columns a spectrum uses are kept.

    The kept numbers count against ``max_uncompressed_bytes`` as well as ``max_pixels``: a
    gzipped table of short rows holds more bytes as float64 than as text.
    """

    def __init__(
        self, columns: list[_ColumnSpec], delimiter: str | None, source: str, limits: ReadLimits
    ) -> None:
        self.columns = columns
        self.width = len(columns)
        self.delimiter = delimiter
        self.source = source
        self.limits = limits
        self.kept = [i for i, spec in enumerate(columns) if spec.role != "other"]
        self.keep_all = len(self.kept) == self.width
        self.max_rows = min(limits.max_pixels, limits.max_uncompressed_bytes // (8 * self.width))
        self.values = packed_array("d")  # row-major, 8 bytes a number
        self.rows = 0

    @classmethod
    def start(
        cls,
        number: int,
        first: str,
        comments: list[str],
        source: str,
        limits: ReadLimits,
        declared: tuple[str, ...] | None = None,
    ) -> _TableRows:
        if len(first) > _MAX_HEADER_CHARS:
            raise SpectrumFormatError(
                f"{source}: not a spectrum file: line {number} has {len(first)} characters, "
                "too long for a table header or row"
            )
        delimiter = "," if "," in first else None
        if declared is not None:
            columns, data_rows = _declared_header([(number, first)], declared, delimiter, source)
        else:
            columns, data_rows = _table_header([(number, first)], comments, delimiter, source)
        table = cls(columns, delimiter, source, limits)
        for row_number, row in data_rows:
            table.add(row_number, row)
        return table

    def add(self, number: int, line: str) -> None:
        if self.rows >= self.max_rows:
            raise self._too_many()
        tokens = line.split(self.delimiter) if self.delimiter else line.split()
        if len(tokens) != self.width:
            raise SpectrumFormatError(
                f"{self.source}: length mismatch at line {number}: {len(tokens)} values, "
                f"but the table has {self.width} columns"
            )
        try:
            values = [float(token) for token in tokens]
        except ValueError:
            values = self._slow_values(number, tokens)
        self.values.extend(values if self.keep_all else [values[i] for i in self.kept])
        self.rows += 1

    def _slow_values(self, number: int, tokens: list[str]) -> list[float]:
        values = []
        for column, raw in enumerate(tokens):
            token = raw.strip()
            try:
                values.append(float(token) if token else np.nan)
            except ValueError:
                raise SpectrumFormatError(
                    f"{self.source}: line {number}, column {column + 1}: {token!r} is not a number"
                ) from None
        return values

    def arrays(self) -> dict[str, np.ndarray]:
        if not self.rows:
            raise SpectrumFormatError(f"{self.source}: table has a header but no data rows")
        values = np.frombuffer(self.values, dtype=np.float64).reshape(self.rows, -1)
        return {self.columns[i].role: values[:, j] for j, i in enumerate(self.kept)}

    def _too_many(self) -> SpectrumTooLarge:
        if self.rows >= self.limits.max_pixels:
            return over_limit(
                self.source,
                f"more than {self.limits.max_pixels} rows (pixels) in one spectrum",
                self.limits,
                "max_pixels",
            )
        return over_limit(
            self.source,
            f"more than {self.rows} rows of {self.width} numbers, more than "
            f"{self.limits.max_uncompressed_bytes} bytes as float64",
            self.limits,
            "max_uncompressed_bytes",
        )


def _table_spectrum(
    arrays: dict[str, np.ndarray],
    columns: list[_ColumnSpec],
    settings: _TableSettings,
    source: str,
    ignored: list[str],
) -> Spectrum:
    for role, array in arrays.items():
        if array.ndim != 1:
            raise SpectrumFormatError(
                f"{source}: {role} must be one-dimensional, got shape {array.shape}"
            )
    _check_lengths(source, **arrays)
    wave_spec = next(spec for spec in columns if spec.role == "wavelength")
    unit = wave_spec.unit or settings.wavelength_unit
    frame = wave_spec.frame or settings.frame or "vacuum"
    if wave_spec.frame:
        said = frame_meta(frame, "file", f"column name {wave_spec.name!r}")
    elif settings.frame:
        said = frame_meta(frame, "file", "a frame line in the table header")
    else:
        said = frame_meta(frame, "assumed", "the table names no frame")
    wavelength = np.asarray(arrays["wavelength"], dtype=np.float64) * _angstrom_per(unit, source)
    meta: dict[str, Any] = {
        "wavelength_unit_in_file": unit or "Angstrom",
        "wavelength_frame_in_file": frame,
        **said,
    }
    if frame == "air":
        wavelength = _air_column_to_vacuum(wavelength, source)
    arrays = _flux_arrays(arrays, columns, wavelength, meta, source)
    ivar, mask = _table_ivar(arrays)
    if ignored:
        meta["ignored_columns"] = ignored
    if settings.extra:
        meta["header"] = dict(settings.extra)
    validated = validate_arrays(wavelength, arrays["flux"], ivar, source=source, mask=mask)
    resolution = _directive_resolution(settings.extra, source)
    return _finish(validated, source=source, survey="table", meta=meta, resolution=resolution)


def _flux_arrays(
    arrays: dict[str, np.ndarray],
    columns: list[_ColumnSpec],
    wavelength: np.ndarray,
    meta: dict[str, Any],
    source: str,
) -> dict[str, np.ndarray]:
    """AB magnitudes become f_lambda (and their error a flux error); a headerless flux column
    that looks like magnitudes is refused (agent.spectra.magnitudes)."""
    if "ab_mag" not in arrays:
        flux_spec = next(spec for spec in columns if spec.role == "flux")
        if flux_spec.name.endswith("(headerless)"):
            magnitudes.refuse_magnitude_like(arrays["flux"], source, _DECLARE_WHERE)
        return arrays
    mag_spec = next(spec for spec in columns if spec.role == "ab_mag")
    converted = {role: array for role, array in arrays.items() if role != "ab_mag"}
    with np.errstate(divide="ignore", invalid="ignore"):
        converted["flux"] = magnitudes.ab_to_flambda(arrays["ab_mag"], wavelength)
    if "error" in arrays:
        converted["error"] = magnitudes.magnitude_error_to_flux_error(
            converted["flux"], np.asarray(arrays["error"], dtype=np.float64)
        )
    meta["flux_unit"] = magnitudes.FLUX_UNIT
    meta["flux_from_ab_magnitudes"] = {"column": mag_spec.name, "conversion": magnitudes.CONVERSION}
    return converted


_RESOLUTION_KEYS = {"resolution": "", "resolving_power": "", "r": "", "fwhm": "fwhm="}
_RESOLUTION_KEYS |= {"lsf_fwhm": "fwhm=", "instrumental_fwhm": "fwhm="}


def _directive_resolution(extra: dict[str, str], source: str) -> Resolution | None:
    """``# resolution: 1800`` / ``# R = 1800`` / ``# fwhm: 2.5`` (Angstrom) in a table header."""
    for key, prefix in _RESOLUTION_KEYS.items():
        if key in extra:
            try:
                parsed = parse_user_value(prefix + extra[key])
            except ResolutionError as exc:
                raise SpectrumFormatError(f"{source}: header directive {key!r}: {exc}") from exc
            return Resolution(parsed.wavelength, parsed.fwhm, "file", f"table header {key}")
    return None


def _air_column_to_vacuum(wavelength: np.ndarray, source: str) -> np.ndarray:
    if not np.all(np.isfinite(wavelength) & (wavelength > 0)):
        _check_wavelength_values(wavelength, source)
    return np.asarray(air_to_vacuum(wavelength), dtype=np.float64)


def _table_ivar(arrays: dict[str, np.ndarray]) -> tuple[np.ndarray | None, np.ndarray | None]:
    mask = arrays["mask"] != 0 if "mask" in arrays else None
    if "ivar" in arrays:
        return arrays["ivar"], mask
    if "error" not in arrays:
        return None, mask
    error = np.asarray(arrays["error"], dtype=np.float64)
    usable = np.isfinite(error) & (error > 0)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        ivar = np.where(usable, 1.0 / error**2, 0.0)
    bad = ~usable if mask is None else (mask | ~usable)
    return ivar, bad


def _angstrom_per(unit: str | None, source: str) -> float:
    """Angstrom per ``unit`` of wavelength; length units only."""
    if unit is None or unit.strip().lower() in _ANGSTROM_SPELLINGS:
        return 1.0
    try:
        parsed = units.Unit(unit.strip())
        return float(parsed.to(units.AA))
    except (ValueError, TypeError, units.UnitsError) as exc:
        raise SpectrumFormatError(
            f"{source}: unknown wavelength unit {unit!r} (expected a length such as "
            "Angstrom, nm or micron)"
        ) from exc
