"""A typed outside set (issue 36): real observed spectra of stars of known type that no part of
the corpus uses, taken from a pinned registry package, for measuring the inspector where no one
tuned it.

    python -m agent.outside_set fetch   # what `make outside-data` runs
    python -m agent.outside_set list

Nothing is copied into the repository. ``fetch`` downloads the pinned package with pip into the
corpus cache (``$SPECVET_DATA_CACHE``, default ``~/.cache/specvet``, beside the corpus wheels),
checks its SHA-256 and extracts the listed files under ``extracted/outside``. The manifest
``agent/data/outside_set.json`` records, per star, its spectral type, where the type comes from
(``type_source``: "package", a table shipped beside the spectra, or "literature", a published
type entered by hand) and the reference; per spectrum, the path inside the package and how a
user would declare it (headerless tables: the column roles and the air wavelength frame, as
``agent.spectra.Declared``); ``left_out`` lists what was looked at and not used, and why.

Source: the ``pypeit`` 1.9.0 source distribution (BSD-3-Clause), the last release whose archive
ships ``pypeit/data/standards`` (from 1.13 the package downloads them at run time):

- ``calspec``: HST CALSPEC flux standards (STIS, FOS, IUE+Oke; Bohlin 1996, Bohlin et al. 2001)
  of white dwarfs (DA, DB, DO, DC), hot subdwarfs, an O9 star, solar analogues, an M7 dwarf,
  an L and a T dwarf; typed by the README's table. Models and NICMOS-only files are left out.
- ``esofil``: Hamuy et al. (1992, 1994) tables, 16 A bins for ten bright B and A stars (typed
  from the Bright Star Catalogue) and 50 A bins for white dwarfs (typed by the X-shooter list
  shipped beside them, or McCook & Sion 1999).
- ``noao``: Massey et al. (1988) and Massey & Gronwall (1990) AB-magnitude tables (50 A bins)
  of three O stars and two DA white dwarfs.

Labels follow the corpus's rule (``agent.real_corpus.label_rule`` on the star's type), plus the
tasks a star's entry leaves it out of, with the reason (BD+33 2642, a post-AGB star with a B2 IV
spectrum, is left out of B). A star whose type is doubtful is not in the set (``left_out``).
Some stars are also in the corpus under an HD number (``aliases``): the benchmark leaves the
star out of the library comparison, as the development benchmark does for its own spectra.

Looked at and not used: pypeit 2.0.1 (ships only the standards' index; the spectra are
downloaded at run time), specreduce 1.9.0 (its standards are downloaded from GitHub), speclite
1.0.0, linetools 0.3.2 (line lists and LSFs), astra-spectra 1.3.0 (telluric profiles),
pyspeckit 1.0.4 (radio test cubes); ``pyhammer`` on PyPI is a build tool, not PyHammer (which is
not on PyPI), and no ``pystellibs`` is there; pyphot's Vega (HST/STIS; Vega is here from
CALSPEC's IUE+Hayes file) and sedkit's two spectra (M8, L3: no task's positives) were not
added (see ``agent.real_corpus``); the Debian packages iraf-noao (untyped ``onedstds``, see
``agent.bench.onedstds``) and starlink-* (Java libraries, no spectra).
"""

from __future__ import annotations

import argparse
import json
import sys
import tarfile
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from agent.real_corpus import (
    TASKS,
    cache_dir,
    file_sha256,
    label_rule,
    object_key,
    parse_spectral_type,
    pip_download,
)
from agent.spectra import Declared, Spectrum, load_spectra

MANIFEST_PATH = Path(__file__).resolve().parent / "data" / "outside_set.json"
TYPE_SOURCES = ("package", "literature")


class OutsideSetUnavailable(RuntimeError):
    """The package cannot be had, has changed, or a listed file is missing from the cache."""


@dataclass(frozen=True)
class Star:
    name: str
    type: str  # the spectral type as the reference writes it ('DA1', 'B9.5Vn', 'sdO')
    type_source: str  # "package" or "literature"
    reference: str
    aliases: tuple[str, ...]  # other names, an HD number first where the star has one
    excluded_from: tuple[str, ...]  # tasks left out beyond the label rule (reason in note)
    note: str

    @property
    def object_keys(self) -> tuple[str, ...]:
        return tuple(object_key(name) for name in (self.name, *self.aliases))


@dataclass(frozen=True)
class OutsideEntry:
    id: str
    source: str
    member: str  # path under the source's root inside the archive
    star: Star
    instrument: str
    columns: tuple[str, ...] | None  # declared column roles of a headerless table
    frame: str | None  # declared wavelength frame

    @property
    def roles(self) -> dict[str, tuple[str, ...]]:
        rule = label_rule("STAR", self.star.type)
        excluded = tuple(dict.fromkeys((*rule["excluded_from"], *self.star.excluded_from)))
        return {
            "positive_for": tuple(t for t in rule["positive_for"] if t not in excluded),
            "hard_negative_for": tuple(t for t in rule["hard_negative_for"] if t not in excluded),
            "excluded_from": excluded,
        }

    def label(self, task: str) -> str | None:
        """YES / NO for ``task``; None when the star is left out of it."""
        roles = self.roles
        if task in roles["excluded_from"]:
            return None
        return "YES" if task in roles["positive_for"] else "NO"

    @property
    def declared(self) -> Declared | None:
        if self.columns is None and self.frame is None:
            return None
        return Declared(columns=self.columns, frame=self.frame)


# --- manifest ---------------------------------------------------------------------------------


@cache
def _manifest() -> dict[str, Any]:
    return dict(json.loads(MANIFEST_PATH.read_text(encoding="utf-8")))


def sources() -> dict[str, dict[str, Any]]:
    return dict(_manifest()["sources"])


def entries_of(document: dict[str, Any]) -> list[OutsideEntry]:
    stars = {
        row["name"]: Star(
            name=row["name"],
            type=row["type"],
            type_source=row["type_source"],
            reference=row["reference"],
            aliases=tuple(row.get("aliases", ())),
            excluded_from=tuple(row.get("excluded_from", ())),
            note=row.get("note", ""),
        )
        for row in document["stars"]
    }
    source = next(iter(document["sources"]))
    return [
        OutsideEntry(
            id=row["id"],
            source=row.get("source", source),
            member=row["member"],
            star=stars[row["star"]],
            instrument=row["instrument"],
            columns=tuple(row["columns"]) if row.get("columns") else None,
            frame=row.get("frame"),
        )
        for row in document["spectra"]
    ]


def load_manifest() -> list[OutsideEntry]:
    return entries_of(_manifest())


def manifest_problems(document: dict[str, Any]) -> list[str]:
    """What is wrong with a manifest document (an empty list when nothing): ids unique, every
    spectrum's star listed, every star with a type, a type source and a reference, every task
    name known, no model file, no path leaving the source's root."""
    problems: list[str] = []
    names = [row["name"] for row in document["stars"]]
    problems += [
        f"star {n!r} listed twice" for n in sorted({n for n in names if names.count(n) > 1})
    ]
    for row in document["stars"]:
        if row.get("type_source") not in TYPE_SOURCES:
            problems.append(f"{row['name']}: type_source must be one of {TYPE_SOURCES}")
        if not str(row.get("reference", "")).strip() or not str(row.get("type", "")).strip():
            problems.append(f"{row['name']}: a type and its reference are required")
        unknown = set(row.get("excluded_from", ())) - set(TASKS)
        if unknown:
            problems.append(f"{row['name']}: unknown tasks {sorted(unknown)}")
        if row.get("excluded_from") and not str(row.get("note", "")).strip():
            problems.append(f"{row['name']}: a task left out needs its reason in 'note'")
    ids = [row["id"] for row in document["spectra"]]
    problems += [f"spectrum id {i!r} twice" for i in sorted({i for i in ids if ids.count(i) > 1})]
    for row in document["spectra"]:
        if row["star"] not in names:
            problems.append(f"{row['id']}: star {row['star']!r} is not listed")
        member = str(row["member"])
        if member.startswith("/") or ".." in Path(member).parts:
            problems.append(f"{row['id']}: member {member!r} leaves the source's root")
        if "_mod_" in member or "_nic_" in member:
            problems.append(f"{row['id']}: {member} is a model or a NICMOS-only file")
        if row.get("columns"):
            try:
                Declared(columns=tuple(row["columns"]), frame=row.get("frame"))
            except ValueError as exc:
                problems.append(f"{row['id']}: {exc}")
    return problems


# --- the cache --------------------------------------------------------------------------------


def archive_path(source: str) -> Path:
    return cache_dir() / "wheels" / sources()[source]["file"]


def extracted_path(entry: OutsideEntry) -> Path:
    return cache_dir() / "extracted" / "outside" / entry.source / entry.member


def _extract(archive: Path, root: str, wanted: dict[str, Path]) -> None:
    """Write each wanted member (path under ``root``) to its path in the cache."""
    if archive.name.endswith((".tar.gz", ".tgz")):
        with tarfile.open(archive, "r:gz") as tar:
            for info in tar:
                name = info.name.removeprefix(root)
                if info.isfile() and name in wanted:
                    handle = tar.extractfile(info)
                    assert handle is not None
                    wanted[name].parent.mkdir(parents=True, exist_ok=True)
                    wanted[name].write_bytes(handle.read())
    else:
        with zipfile.ZipFile(archive) as wheel:
            for name, path in wanted.items():
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(wheel.read(root + name))


def fetch(*, download: bool = True, quiet: bool = False) -> list[Path]:
    """Make sure the pinned package is in the cache with its recorded hash and every listed
    spectrum is extracted; return the extracted paths. Raises OutsideSetUnavailable."""
    entries = load_manifest()
    for name, record in sources().items():
        target = archive_path(name)
        missing = {
            e.member: extracted_path(e)
            for e in entries
            if e.source == name and not extracted_path(e).exists()
        }
        if not missing:
            continue
        if not target.exists():
            if not download:
                raise OutsideSetUnavailable(
                    f"{record['package']}=={record['version']} is not in {target.parent}; run "
                    "`make outside-data` (python -m agent.outside_set fetch)"
                )
            pip_download(record, target, quiet=quiet, unavailable=OutsideSetUnavailable)
        found = file_sha256(target)
        if found != record["sha256"]:
            raise OutsideSetUnavailable(
                f"{target} has SHA-256 {found}, the manifest pins {record['sha256']}: "
                "delete it and fetch again"
            )
        _extract(target, record["root"], missing)
        absent = [member for member, path in missing.items() if not path.exists()]
        if absent:
            raise OutsideSetUnavailable(f"{target.name} lacks {', '.join(absent)}")
    return [extracted_path(e) for e in entries]


def load_entry(entry: OutsideEntry) -> Spectrum:
    """The spectrum as a new user would read it: the file through the project's reader, with
    the declaration a headerless table needs."""
    path = extracted_path(entry)
    if not path.exists():
        raise OutsideSetUnavailable(f"{path} is missing; run `make outside-data`")
    spectrum = load_spectra(path, declared=entry.declared)[0]
    spectrum.meta = {**spectrum.meta, "outside_id": entry.id}
    return spectrum


def load_outside_set() -> list[tuple[OutsideEntry, Spectrum]]:
    fetch(download=False)
    return [(entry, load_entry(entry)) for entry in load_manifest()]


def counts(entries: Sequence[OutsideEntry]) -> str:
    lines = [f"{len(entries)} spectra of {len({e.star.name for e in entries})} stars"]
    for task in TASKS:
        positives = [e for e in entries if e.label(task) == "YES"]
        labelled = [e for e in entries if e.label(task) is not None]
        if positives:
            lines.append(
                f"  {task}: {len(positives)} positive spectra of "
                f"{len({e.star.name for e in positives})} stars, {len(labelled)} labelled"
            )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m agent.outside_set", description=__doc__)
    parser.add_argument("command", choices=("fetch", "list"))
    args = parser.parse_args(argv)
    entries = load_manifest()
    if args.command == "fetch":
        try:
            paths = fetch()
        except OutsideSetUnavailable as exc:
            print(exc, file=sys.stderr)
            return 1
        print(f"{len(paths)} spectra in {cache_dir() / 'extracted' / 'outside'}")
    else:
        for e in entries:
            parsed = parse_spectral_type(e.star.type)
            kind = parsed.kind if parsed else "no MK class"
            print(f"{e.id:<36} {e.star.name:<18} {e.star.type:<9} {kind:<11} {e.instrument}")
    print(counts(entries))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
