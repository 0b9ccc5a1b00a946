"""The reader's figures on the real corpus: every file of the manifest read as shipped (the wheel
member or the shared file, bytes unchanged) with ``load_spectra``, counted as read or refused,
refusals grouped by reason.

    python -m agent.real_corpus fetch                 # the cache, once
    python -m agent.real_reading [--json out.json]    # the figures
    python -m agent.real_reading --wheel W.whl --under folder/   # a library not yet in it

Where specutils is installed (requirements-dev.txt; agent/spectra does not use it), each file it
also reads is cross-checked: same number of pixels, wavelengths within 1e-6 relative (after the
air-to-vacuum conversion is undone) and the same flux; without it the figures say so.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import sys
import tempfile
import zipfile
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from agent import real_corpus
from agent.spectra import Spectrum, SpectrumFormatError, load_spectra


@dataclass
class FileOutcome:
    id: str
    member: str
    read: bool
    reason: str = ""  # the refusal, without the file's path
    layout: str = ""
    frame: str = ""
    pixels: int = 0
    specutils: str = ""  # "agrees", "differs: ...", "no loader", "not installed"


@dataclass
class ReadingFigures:
    files: int = 0
    read: int = 0
    refused: int = 0
    refusals: dict[str, int] = field(default_factory=dict)
    layouts: dict[str, int] = field(default_factory=dict)
    frames: dict[str, int] = field(default_factory=dict)
    specutils: dict[str, int] = field(default_factory=dict)
    outcomes: list[FileOutcome] = field(default_factory=list)


_NUMBERS = re.compile(r"\d+(?:\.\d+)?")


def reason_class(message: str, path: str) -> str:
    """The refusal without the path and with numbers as N, so that like reasons count together."""
    text = message.replace(path, "").lstrip(": ")
    return _NUMBERS.sub("N", text)[:160]


def shipped_file(entry: real_corpus.CorpusEntry, folder: Path) -> Path:
    """The entry's file as shipped: the shared file itself, or the wheel member's bytes."""
    record = real_corpus.sources()[entry.source]
    if "package" not in record:
        return (real_corpus.PROJECT_ROOT / entry.member).resolve()
    target = folder / entry.id / Path(entry.member).name
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(real_corpus._wheel_member(entry.source, entry.member))
    return target


def read_one(
    entry: real_corpus.CorpusEntry, folder: Path, *, with_specutils: bool = True
) -> FileOutcome:
    outcome = FileOutcome(id=entry.id, member=entry.member, read=False)
    try:
        path = shipped_file(entry, folder)
    except (real_corpus.CorpusUnavailable, KeyError, OSError) as exc:
        outcome.reason = f"not reachable: {exc}"
        return outcome
    return read_path(outcome, path, with_specutils=with_specutils)


def read_path(outcome: FileOutcome, path: Path, *, with_specutils: bool) -> FileOutcome:
    try:
        spectra = load_spectra(path)
    except SpectrumFormatError as exc:
        outcome.reason = reason_class(str(exc), str(path))
        return outcome
    spectrum = spectra[0]
    outcome.read = True
    outcome.layout = str(spectrum.meta.get("layout") or spectrum.survey)
    outcome.frame = str(spectrum.meta.get("wavelength_frame_source", "not recorded"))
    outcome.pixels = len(spectrum)
    outcome.specutils = cross_check(path, spectrum) if with_specutils else "not asked"
    return outcome


def cross_check(path: Path, spectrum: Spectrum) -> str:
    """What specutils reads from ``path`` compared with ``spectrum`` (see the module docstring)."""
    if importlib.util.find_spec("specutils") is None:
        return "not installed"
    from specutils import Spectrum as SpecutilsSpectrum  # type: ignore[import-untyped]

    try:
        theirs = SpecutilsSpectrum.read(str(path))
    except Exception as exc:  # specutils raises anything from "no loader" to a parse error
        return f"not read by specutils ({type(exc).__name__}: {str(exc)[:70]})"
    wave = np.asarray(theirs.spectral_axis.to_value("Angstrom"), dtype=np.float64).reshape(-1)
    flux = np.asarray(theirs.flux.value, dtype=np.float64).reshape(-1)
    if wave.size != len(spectrum):
        return f"differs: {wave.size} pixels, ours {len(spectrum)}"
    if wave[0] > wave[-1]:
        wave, flux = wave[::-1], flux[::-1]
    ours = spectrum.wavelength
    if spectrum.meta.get("wavelength_frame") == "air":
        from agent.spectra import vacuum_to_air

        ours = np.asarray(vacuum_to_air(ours))
    if not np.allclose(wave, ours, rtol=1e-6, atol=0.0):
        return "differs: wavelengths"
    if not np.allclose(flux, spectrum.flux, rtol=1e-6, equal_nan=True):
        return "differs: flux"
    return "agrees"


def reading_figures(
    entries: Sequence[real_corpus.CorpusEntry], *, with_specutils: bool = True
) -> ReadingFigures:
    with tempfile.TemporaryDirectory(prefix="specvet-reading-") as folder:
        outcomes = [read_one(e, Path(folder), with_specutils=with_specutils) for e in entries]
    return summarise(outcomes)


_SPECTRUM_FILE = re.compile(r"\.(?:fits?|fts)(?:\.gz)?$", re.IGNORECASE)


def wheel_figures(wheel: Path, under: str, *, with_specutils: bool = True) -> ReadingFigures:
    """Every FITS member of ``wheel`` under the folder ``under``, read as shipped: the figures
    for a library before it has entries in the manifest."""
    outcomes = []
    with zipfile.ZipFile(wheel) as archive, tempfile.TemporaryDirectory() as folder:
        members = [
            m for m in archive.namelist() if m.startswith(under) and _SPECTRUM_FILE.search(m)
        ]
        for number, member in enumerate(sorted(members)):
            path = Path(folder) / str(number) / Path(member).name
            path.parent.mkdir()
            path.write_bytes(archive.read(member))
            outcome = FileOutcome(id=member, member=member, read=False)
            outcomes.append(read_path(outcome, path, with_specutils=with_specutils))
            path.unlink()
    return summarise(outcomes)


def summarise(outcomes: list[FileOutcome]) -> ReadingFigures:
    figures = ReadingFigures(outcomes=outcomes)
    figures.files = len(figures.outcomes)
    figures.read = sum(outcome.read for outcome in figures.outcomes)
    figures.refused = figures.files - figures.read
    figures.refusals = dict(Counter(o.reason for o in figures.outcomes if not o.read))
    figures.layouts = dict(Counter(o.layout for o in figures.outcomes if o.read))
    figures.frames = dict(Counter(o.frame for o in figures.outcomes if o.read))
    figures.specutils = dict(Counter(o.specutils for o in figures.outcomes if o.read))
    return figures


def report(figures: ReadingFigures) -> str:
    lines = [
        f"{figures.files} files, read as shipped: {figures.read} read, {figures.refused} refused"
    ]
    for title, counts in (
        ("refused, by reason", figures.refusals),
        ("read, by layout", figures.layouts),
        ("wavelength frame (read files)", figures.frames),
        ("specutils cross-check (read files)", figures.specutils),
    ):
        if counts:
            lines.append(f"{title}:")
            lines += [f"  {n:5d}  {key}" for key, n in sorted(counts.items(), key=lambda i: -i[1])]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m agent.real_reading", description=__doc__)
    parser.add_argument("--split", choices=real_corpus.SPLITS)
    parser.add_argument("--json", type=Path, help="also write every file's outcome here")
    parser.add_argument("--wheel", type=Path, help="read a wheel's FITS members instead")
    parser.add_argument("--under", default="", help="with --wheel: only members in this folder")
    args = parser.parse_args(argv)
    if args.wheel:
        figures = wheel_figures(args.wheel, args.under)
        print(f"{args.wheel.name}:{args.under}")
        print(report(figures))
        return 0
    try:
        real_corpus.fetch(download=False, quiet=True)
    except real_corpus.CorpusUnavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    figures = reading_figures(real_corpus.load_manifest(args.split))
    print(report(figures))
    if args.json:
        data: dict[str, Any] = asdict(figures)
        args.json.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
