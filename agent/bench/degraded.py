"""Does the inspector's confidence hold when the development spectra are observed coarsely?

    python -m agent.bench.degraded [--rules-cache DIR] [--fwhm 16,50]

The development part of the real corpus is mostly library spectra at 2.5-6 Å, and every
calibration is fitted on them at that resolution; spectrophotometric standards are tabulated
in 16-50 Å bins (Hamuy et al. 1992, 1994; Massey et al. 1988). Each development spectrum is
degraded here (``degrade``: a Gaussian line-spread function to FWHM F, then flux-conserving
bins F Å wide, the table read as a bare table is: FWHM = two bins) and answered by the
inspector (rule-based/v7) whose every library fit and type regression is fitted on the native
spectra of the other four folds (``cross_validated``, 5-fold by object as
``agent.bench.real_cv``; the rules' own calibration is the native development part's, and the
spectrum's own object is left out of the library as always). Per task the library decides and
per resolution: balanced accuracy, ECE (10 bins), the 95th percentile of the ECE a perfectly
calibrated inspector would show with these confidences (labels drawn ~ Bernoulli(confidence),
``null_ece_quantile``), mean confidence minus accuracy (positive: overconfident) and the wrong
answers at >= 0.9; then B's and A's reliability bins. Development only: nothing here reads the
validation part or the outside set.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy import ndimage

from agent.bench.real import _platts, fit_calibration, real_items, score_spectra
from agent.bench.real_cv import fold_of, variant_fits
from agent.bench.real_fits import Scored, TypeFits, probability_yes
from agent.calibration import Calibrator, expected_calibration_error, reliability_bins
from agent.library_match import DECIDABLE, default_matcher
from agent.real_corpus import load_manifest, object_key
from agent.real_evaluation import CONFIDENT
from agent.redshift import _rebin
from agent.resolution import FWHM_PER_SIGMA
from agent.spectra import Spectrum

DEGRADATIONS = (16.0, 50.0)  # Å: the FWHM and the bin width of the degraded copies
NULL_DRAWS = 2000


def degrade(spectrum: Spectrum, fwhm: float) -> Spectrum | None:
    """``spectrum`` as a table of ``fwhm``-Å bins would hold it: convolved to an FWHM of
    ``fwhm`` (a Gaussian of sqrt(fwhm² - own²), own at the middle of its range), then the mean
    flux over each bin (flux conserving); no ivar, mask or declared resolution, so it is read as
    a bare table (FWHM = two bins, ``Resolution.from_sampling``). None when under 10 bins."""
    wave = np.asarray(spectrum.wavelength, dtype=np.float64)
    flux = np.asarray(spectrum.flux, dtype=np.float64)
    good = np.isfinite(wave) & np.isfinite(flux) & spectrum.good
    if np.count_nonzero(good) < 20:
        return None
    w, f = wave[good], flux[good]
    step = min(float(np.median(np.diff(w))), fwhm / 8.0)
    fine = np.arange(w[0], w[-1], step)
    values = np.interp(fine, w, f)
    middle = float(np.median(w))
    own = spectrum.resolution.fwhm_at(middle) if spectrum.resolution is not None else 0.0
    sigma = math.sqrt(max(fwhm**2 - own**2, (0.25 * fwhm) ** 2)) / FWHM_PER_SIGMA / step
    smoothed = ndimage.gaussian_filter1d(values, sigma, mode="nearest")
    edges = np.arange(math.ceil(w[0] / fwhm) * fwhm, w[-1], fwhm)
    if edges.size < 11:
        return None
    binned = _rebin(fine, smoothed, edges)
    # a bin over a gap of the original (wider than two of its pixels and a tenth of the bin)
    # holds no data
    gaps = np.diff(w)
    wide = gaps > max(2.5 * float(np.median(gaps)), 0.1 * fwhm)
    holed = np.zeros(edges.size - 1, dtype=bool)
    for start, stop in zip(w[:-1][wide], w[1:][wide], strict=True):
        holed |= (edges[1:] > start) & (edges[:-1] < stop)
    centres = 0.5 * (edges[1:] + edges[:-1])
    return Spectrum(
        centres[~holed],
        binned[~holed],
        redshift=spectrum.redshift,
        survey="table",
        object_id=spectrum.object_id,
        source=f"{spectrum.source} degraded to {fwhm:g} Å",
    )


def degraded_items(
    items: Sequence[tuple[str, Spectrum, dict[str, str | None]]], fwhm: float
) -> list[tuple[str, Spectrum, dict[str, str | None]]]:
    out = []
    for item, spectrum, labels in items:
        coarse = degrade(spectrum, fwhm)
        if coarse is not None:
            out.append((item, coarse, labels))
    return out


def null_ece_quantile(
    confidences: Sequence[float], q: float = 0.95, draws: int = NULL_DRAWS, seed: int = 0
) -> float:
    """The ``q`` quantile of the ECE of a perfectly calibrated inspector giving these
    confidences: each answer right with probability its confidence."""
    rng = np.random.default_rng(seed)
    known = np.asarray(confidences, dtype=np.float64)
    values = [
        expected_calibration_error(
            reliability_bins(list(known), list(rng.random(known.size) < known), n_bins=10)
        )
        for _ in range(draws)
    ]
    return float(np.quantile(values, q))


@dataclass(frozen=True)
class Row:
    n: int
    balanced_accuracy: float
    ece: float
    null95: float
    confident_wrong: int
    overconfidence: float  # mean confidence minus accuracy (negative: underconfident)


def figures(rows: Sequence[tuple[str, float]]) -> Row:
    labels = np.array([label == "YES" for label, _ in rows])
    p = np.array([p for _, p in rows])
    said = p >= 0.5
    confidence = np.maximum(p, 1.0 - p)
    correct = said == labels
    rates = [float(np.mean(said[labels])) if labels.any() else math.nan]
    rates.append(float(np.mean(~said[~labels])) if (~labels).any() else math.nan)
    ece = expected_calibration_error(reliability_bins(list(confidence), list(correct), n_bins=10))
    return Row(
        len(rows),
        float(np.nanmean(rates)),
        ece,
        null_ece_quantile(list(confidence)),
        int(np.sum((confidence >= CONFIDENT) & ~correct)),
        float(np.mean(confidence) - np.mean(correct)),
    )


def format_rows(table: Mapping[str, Mapping[str, Row]]) -> str:
    lines = [
        "DEVELOPMENT, 5-fold by object, rule-based/v7 with every fit on the other folds' native "
        "spectra: "
        f"bacc / ECE (calibrated 95%) / confidence - accuracy / wrong at >= {CONFIDENT:g} of n"
    ]
    for task in DECIDABLE:
        cells = [
            f"{name} {r.balanced_accuracy:.3f} / {r.ece:.3f} ({r.null95:.3f}) / "
            f"{r.overconfidence:+.3f} / {r.confident_wrong} of {r.n}"
            for name, rows in table.items()
            if (r := rows.get(task)) is not None
        ]
        if cells:
            lines.append(f"  {task:<3} " + " | ".join(cells))
    return "\n".join(lines)


def cross_validated(
    native: Sequence[Scored],
    tested: Mapping[str, Sequence[Scored]],
    calibration: Mapping[str, Calibrator],
    pulls: Mapping[str, float],
    types: TypeFits,
    folds: int = 5,
) -> dict[str, dict[str, list[tuple[str, float]]]]:
    """(label, P(YES)) per set of ``tested`` and task the library decides, 5-fold by object:
    the answers of fold k given by v7's fits (and type regression) on the native answers of the
    other folds, as ``agent.bench.real_cv`` gives the native ones."""
    objects = {entry.id: object_key(entry.object) for entry in load_manifest()}
    everything = [*native, *(s for rows in tested.values() for s in rows)]
    assigned = {s.item: fold_of(s.item, objects, folds) for s in everything}
    out: dict[str, dict[str, list[tuple[str, float]]]] = {
        name: {task: [] for task in DECIDABLE} for name in tested
    }
    for k in range(folds):
        training = types.typed_answers(
            [s for s in native if assigned[s.item] != k], frozenset({k}), own_fold=True
        )
        fits = variant_fits("v7", training, calibration, pulls)
        for name, rows in tested.items():
            testing = types.typed_answers(
                [s for s in rows if assigned[s.item] == k], frozenset({k}), own_fold=False
            )
            for s in testing:
                if s.task in DECIDABLE:
                    p = probability_yes(s, calibration, pulls, fits, "combined")
                    if p is not None:
                        out[name][s.task].append((s.label, p))
    return out


def format_bins(rows: Sequence[tuple[str, float]]) -> str:
    """The reliability bins of one task's answers: confidence range, n, mean confidence and
    accuracy (which side of the diagonal the ECE lies)."""
    confidence = [max(p, 1.0 - p) for _, p in rows]
    correct = [(p >= 0.5) == (label == "YES") for label, p in rows]
    return ", ".join(
        f"{b.low:.1f}-{b.high:.1f}: {b.count} at {b.mean_confidence:.2f} right {b.accuracy:.2f}"
        for b in reliability_bins(confidence, correct, n_bins=10)
        if b.count and b.mean_confidence is not None and b.accuracy is not None
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m agent.bench.degraded", description=__doc__)
    parser.add_argument("--rules-cache", type=Path, help="a folder for the rules' scores")
    parser.add_argument("--fwhm", default=",".join(f"{f:g}" for f in DEGRADATIONS))
    args = parser.parse_args(argv)
    matcher = default_matcher()
    if matcher is None:
        print("no library: the real-data cache is not built here")
        return 1

    def cache(name: str) -> Path | None:
        return None if args.rules_cache is None else args.rules_cache / f"{name}.json"

    items = real_items("development")
    native = score_spectra(items, library=matcher, leave_out=True, rules_cache=cache("development"))
    fits = fit_calibration(native)
    calibration = _platts(fits)
    pulls = {task: float(fit["scope_pull"]) for task, fit in fits.items()}
    tested: dict[str, list[Scored]] = {"native": native}
    for fwhm in (float(f) for f in args.fwhm.split(",") if f):
        tested[f"{fwhm:g} Å"] = score_spectra(
            degraded_items(items, fwhm),
            library=matcher,
            leave_out=True,
            rules_cache=cache(f"development-degraded-{fwhm:g}"),
        )
    answers = cross_validated(native, tested, calibration, pulls, TypeFits(matcher.tiers))
    table = {
        name: {task: figures(rows) for task, rows in answers[name].items() if rows}
        for name in tested
    }
    print(format_rows(table))
    print("reliability bins (confidence range: n at mean confidence, right share):")
    for name in tested:
        for task in ("B", "A"):
            if answers[name][task]:
                print(f"  {name:<6} {task}: {format_bins(answers[name][task])}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
