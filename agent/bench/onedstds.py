"""The inspector on IRAF ``onedstds`` standard-star tables: real spectra no part of the corpus
holds, read as a new user would declare them (wavelength, AB magnitude, bandpass; air).

    make onedstds                         # Debian's iraf-noao (apt-get, as root): the tables
    python -m agent.bench.onedstds [DIR]  # DIR: /usr/lib/iraf/noao/lib/onedstds by default

The tables carry no spectral types (only star names), so this measures **confidence**, not
accuracy: per task, how many answers carry a scope note (a reason the inspector cannot be
confident: the library could not compare a spectrum this coarse, a decisive window missing...)
and every answer given at confidence >= 0.9, with the table's sampling, so each can be checked
by hand against the star's published type. Most tables are sampled every 30-50 Å, coarser than
the library's coarsest working resolution (24 Å FWHM): those answers must all stay below 0.9.
One table per star name is read (the first in path order); a table that is not a
wavelength/AB-magnitude list (IRAF also ships one-column extinction lists) is counted as refused.
"""

from __future__ import annotations

import argparse
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from agent.inspection_tasks import get_task
from agent.policies.rule_based import RuleBasedInspector
from agent.reading import SpectrumFormatError
from agent.real_evaluation import CONFIDENT
from agent.spectra import Declared, Spectrum, load_spectra

DEFAULT_DIR = Path("/usr/lib/iraf/noao/lib/onedstds")
TASKS = ("O", "B", "A", "MG", "WD")


@dataclass(frozen=True)
class Answer:
    table: str  # folder/name
    task: str
    prediction: str
    confidence: float
    sampling: float  # median Å between points
    notes: tuple[str, ...]


def read_tables(directory: Path) -> tuple[list[tuple[str, Spectrum]], int]:
    """(folder/name, spectrum) for one table per star name, and how many tables were refused."""
    spectra: list[tuple[str, Spectrum]] = []
    seen: set[str] = set()
    refused = 0
    for path in sorted(directory.rglob("*.dat")):
        if path.stem in seen:
            continue
        lines = [
            line
            for line in path.read_text(errors="replace").splitlines()
            if line.strip() and line[:1] != "#"
        ]
        if not lines:
            continue
        roles = ("wavelength", "ab_mag", "ignore")[: len(lines[0].split())]
        try:
            (spectrum,) = load_spectra(path, declared=Declared(columns=roles, frame="air"))
        except (SpectrumFormatError, ValueError):
            refused += 1
            continue
        seen.add(path.stem)
        spectra.append((f"{path.parent.name}/{path.stem}", spectrum))
    return spectra, refused


def answers(
    spectra: Sequence[tuple[str, Spectrum]],
    inspector: RuleBasedInspector,
    tasks: Sequence[str] = TASKS,
) -> list[Answer]:
    out = []
    for name, spectrum in spectra:
        sampling = float(np.median(np.diff(np.asarray(spectrum.wavelength, dtype=np.float64))))
        for task in tasks:
            decision = inspector.begin(spectrum=spectrum, task=get_task(task), use_tool=False)
            assert decision.decision is not None
            found = decision.decision
            out.append(
                Answer(
                    name,
                    task,
                    str(found["prediction"]),
                    float(found["confidence"]),
                    sampling,
                    tuple(note["subject"] for note in found["evidence"].get("scope", [])),
                )
            )
    return out


def summary(rows: Sequence[Answer], refused: int) -> str:
    tables = sorted({r.table for r in rows})
    sampling = {r.table: r.sampling for r in rows}
    bins = Counter(
        "<= 10 Å" if s <= 10 else "10-30 Å" if s <= 30 else "> 30 Å" for s in sampling.values()
    )
    noted = Counter(r.task for r in rows if r.notes)
    per_task = Counter(r.task for r in rows)
    confident = [r for r in rows if r.confidence >= CONFIDENT]
    lines = [
        f"IRAF onedstds: {len(tables)} standards read ({refused} tables refused), sampling "
        + ", ".join(f"{k}: {v}" for k, v in sorted(bins.items())),
        "answers with a scope note (not confident, to experts): "
        + ", ".join(f"{t} {noted[t]}/{per_task[t]}" for t in per_task),
        f"answers at confidence >= {CONFIDENT:g}: {len(confident)} of {len(rows)} "
        f"({sum(1 for r in confident if r.notes)} of them with a scope note)",
    ]
    for r in confident:
        lines.append(
            f"  {r.table:<28} {r.task:<3} {r.prediction} at {r.confidence:.3f} "
            f"(sampling {r.sampling:.1f} Å){'; notes: ' + '; '.join(r.notes) if r.notes else ''}"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m agent.bench.onedstds", description=__doc__)
    parser.add_argument("directory", nargs="?", type=Path, default=DEFAULT_DIR)
    args = parser.parse_args(argv)
    if not args.directory.is_dir():
        print(f"{args.directory} is not there: `make onedstds` installs Debian's iraf-noao")
        return 1
    spectra, refused = read_tables(args.directory)
    print(summary(answers(spectra, RuleBasedInspector()), refused))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
