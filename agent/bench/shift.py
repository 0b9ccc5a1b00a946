"""The shift sentinel measured on real spectra: false alarms on runs drawn from the calibration
set's own distribution, detection of runs from sources it does not cover.

    python -m agent.bench.shift [--draws 200] [--size 50] [--onedstds DIR]

The calibration set is the real corpus's development part (what the rule-based inspector was
calibrated on) and the library is the same part, each of its spectra measured against the
library without its own object. Runs:

- *same distribution*: ``--draws`` random draws of ``--size`` spectra of the validation part
  (split by object, the same sources): the share flagged is the false-alarm rate;
- *left-out source*: the calibration set and library without one source (STELIB, Pickles,
  BPGS), the run drawn from that source's validation spectra: the share flagged is the power;
- *not in the corpus* (``--onedstds DIR``): IRAF onedstds standard-star tables (wavelength, AB
  magnitude, bandpass; e.g. a copy of specreduce-data's ``reference_data/onedstds``) read as
  declared AB magnitudes.
"""

from __future__ import annotations

import argparse
import random
from collections.abc import Mapping, Sequence
from pathlib import Path

from agent.real_corpus import CorpusEntry, load_corpus, object_key
from agent.shift import (
    LibraryDistance,
    compare_groups,
    embed,
    grouped,
    spectrum_features,
)
from agent.spectra import Declared, SpectrumFormatError, load_spectra
from agent.spectra.value import Spectrum

Features = dict[str, float | None]


def source_of(entry: CorpusEntry) -> str:
    if entry.member.startswith("EXOSIMS/TargetList/dat_uvk"):
        return "Pickles"
    if "bpgs" in entry.member.lower():
        return "BPGS"
    if "stelib" in entry.member.lower():
        return "STELIB"
    if "miles" in entry.member.lower():
        return "MILES"
    return entry.source


def corpus_features(
    corpus: Sequence[tuple[CorpusEntry, Spectrum]], library: LibraryDistance
) -> list[tuple[str, Features]]:
    """(source, features) of each spectrum, its library distance without its own object."""
    out = []
    for entry, spectrum in corpus:
        features = spectrum_features(spectrum)
        features["library_distance"] = library.of_vector(
            embed(spectrum), exclude=object_key(entry.object)
        )
        out.append((source_of(entry), features))
    return out


def flagged(reference: Sequence[tuple[str, Features]], run: Sequence[tuple[str, Features]]) -> bool:
    """The sentinel's answer for a run: any group (the run, or a source within it) shifted."""
    return any(group.shifted for group in compare_groups(grouped(reference), grouped(run)))


def draw_rate(
    reference: Sequence[tuple[str, Features]],
    pool: Sequence[tuple[str, Features]],
    *,
    draws: int,
    size: int,
    seed: int,
) -> tuple[int, int]:
    rng = random.Random(seed)
    size = min(size, len(pool))
    hits = sum(flagged(reference, rng.sample(list(pool), size)) for _ in range(draws))
    return hits, draws


def onedstds_features(directory: Path, library: LibraryDistance) -> list[tuple[str, Features]]:
    out = []
    for path in sorted(directory.rglob("*.dat")):
        columns = len(
            next(line for line in path.read_text().splitlines() if line[:1] != "#").split()
        )
        roles = ("wavelength", "ab_mag", "ignore")[:columns]
        try:
            (spectrum,) = load_spectra(path, declared=Declared(columns=roles, frame="air"))
        except (SpectrumFormatError, ValueError):
            continue  # fewer than 50 points, or a table of another layout
        features = spectrum_features(spectrum, library)
        out.append(("onedstds", features))
    return out


def _line(name: str, counts: tuple[int, int]) -> str:
    hits, total = counts
    return f"{name:<58} {hits:>4} / {total:<4} = {hits / max(total, 1):.3f}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=int, default=200)
    parser.add_argument("--size", type=int, default=50)
    parser.add_argument("--seed", type=int, default=36)
    parser.add_argument("--onedstds", type=Path, default=None)
    args = parser.parse_args(argv)

    development = load_corpus("development")
    validation = load_corpus("validation")
    library = LibraryDistance.from_spectra(
        (object_key(entry.object), spectrum) for entry, spectrum in development
    )
    reference = corpus_features(development, library)
    pool = corpus_features(validation, library)
    print(f"calibration set: {len(reference)} development spectra; library {len(library.names)}")
    print(f"runs of {args.size} spectra, {args.draws} draws each; flagged share:")
    ref = reference
    print(
        _line(
            "same distribution (validation part)",
            draw_rate(ref, pool, draws=args.draws, size=args.size, seed=args.seed),
        )
    )
    _left_out(development, validation, args)
    if args.onedstds is not None:
        standards = onedstds_features(args.onedstds, library)
        print(
            _line(
                f"onedstds standards, not in the corpus ({len(standards)} read)",
                draw_rate(ref, standards, draws=args.draws, size=args.size, seed=args.seed),
            )
        )
    return 0


def _left_out(
    development: Sequence[tuple[CorpusEntry, Spectrum]],
    validation: Sequence[tuple[CorpusEntry, Spectrum]],
    args: argparse.Namespace,
) -> None:
    sources: Mapping[str, int] = {}
    for entry, _ in validation:
        sources = {**sources, source_of(entry): sources.get(source_of(entry), 0) + 1}
    for source in ("STELIB", "Pickles", "BPGS"):
        kept = [(e, s) for e, s in development if source_of(e) != source]
        library = LibraryDistance.from_spectra((object_key(e.object), s) for e, s in kept)
        reference = corpus_features(kept, library)
        runs = [(e, s) for e, s in validation if source_of(e) == source]
        pool = corpus_features(runs, library)
        size = min(args.size, len(pool))
        print(
            _line(
                f"left-out source {source} ({len(pool)} spectra, runs of {size})",
                draw_rate(reference, pool, draws=args.draws, size=size, seed=args.seed),
            )
        )
        held = [(e, s) for e, s in validation if source_of(e) != source]
        print(
            _line(
                f"  control: the other sources without {source}",
                draw_rate(
                    reference,
                    corpus_features(held, library),
                    draws=args.draws,
                    size=args.size,
                    seed=args.seed,
                ),
            )
        )


if __name__ == "__main__":
    raise SystemExit(main())
