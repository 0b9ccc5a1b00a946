"""How rule-based/v7's type regression and combiner were chosen: the development part alone,
5-fold cross-validated by object (``agent.bench.real_cv``), every fit refitted per fold, the
type regression included. Never the validation part.

    python -m agent.bench.type_cv [--rules-cache DIR]

Per hyper-parameter set of the regression (``agent.type_regression.Hyper``) and L2 penalty of
the combiner: the type regression's own cross-validated error (median and mean absolute error
in subtypes over the B0-F5 range the tasks' boundaries lie in) and the combined answers'
balanced accuracy / ECE / wrong at >= 0.9 for A and B.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from agent.bench.real import _platts, fit_calibration, real_items, score_spectra
from agent.bench.real_cv import cross_validated
from agent.bench.real_fits import TypeFits
from agent.library_match import default_matcher, type_number
from agent.real_corpus import load_manifest
from agent.type_regression import DEFAULT_HYPER, Hyper

HYPERS = (
    Hyper(8, 1.0, 0.03),
    Hyper(16, 1.0, 0.03),
    Hyper(24, 1.0, 0.03),
    Hyper(16, 2.0, 0.01),
    Hyper(16, 0.7, 0.03),
)
PENALTIES = (0.1, 1.0, 10.0)
FORMS = ("type", "type+mk")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m agent.bench.type_cv", description=__doc__)
    parser.add_argument("--rules-cache", type=Path)
    parser.add_argument("--hypers", default="", help="indices into HYPERS (default all)")
    args = parser.parse_args(argv)
    matcher = default_matcher()
    if matcher is None:
        print("no library: the real-data cache is not built here")
        return 1
    cache = None if args.rules_cache is None else args.rules_cache / "development.json"
    development = score_spectra(
        real_items("development"), library=matcher, leave_out=True, rules_cache=cache
    )
    fits = fit_calibration(development)
    calibration = _platts(fits)
    pulls = {task: float(fit["scope_pull"]) for task, fit in fits.items()}
    types_of = {entry.id: type_number(entry.subclass) for entry in load_manifest()}
    # the regression alone, out of fold, and the control that must fail: types shuffled among
    # the training spectra
    for label, seed in (("types as labelled", None), ("types shuffled (control)", 11)):
        control = TypeFits(matcher.tiers, DEFAULT_HYPER, shuffle_seed=seed)
        typed = control.typed_answers(development, own_fold=True)
        cells = []
        for task in ("O", "B", "A"):
            rows = [
                (s.label == "YES", s.evidence.type_probability >= 0.5)
                for s in typed
                if s.task == task and s.evidence is not None
                and np.isfinite(s.evidence.type_probability)
            ]  # fmt: skip
            truth = np.array([y for y, _ in rows])
            said = np.array([a for _, a in rows])
            bacc = 0.5 * (float(np.mean(said[truth])) + float(np.mean(~said[~truth])))
            cells.append(f"{task} {bacc:.3f} (n {len(rows)})")
        print(
            f"type regression alone, {label}: P(task) >= 0.5 balanced accuracy " + ", ".join(cells)
        )
    chosen = [HYPERS[int(i)] for i in args.hypers.split(",") if i] or list(HYPERS)
    for hyper in chosen:
        types = TypeFits(matcher.tiers, hyper)
        # the regression alone: each development spectrum's type estimated without its fold
        seen: dict[str, float] = {}
        for s in development:
            if s.item not in seen and s.type_features is not None:
                estimator = types.estimator(frozenset({types.fold(s.item)}))
                seen[s.item] = estimator.estimate(s.type_features)[0]
        pairs = np.array([(seen[i], types_of[i]) for i in seen if 10 <= types_of[i] < 36])
        error = np.abs(pairs[:, 0] - pairs[:, 1])
        print(
            f"{hyper}: B0-F5 type error median {np.median(error):.2f}, mean {np.mean(error):.2f}"
            f" subtypes (n {error.size})"
        )
        for form, l2 in ((form, l2) for form in FORMS for l2 in PENALTIES):
            combiners = {"A": (form, l2), "B": (form, l2)}
            cv = cross_validated(
                development, calibration, pulls, "v7", types=types, v7_combiners=combiners
            )
            cells = [
                f"{task} {cv[task].balanced_accuracy:.3f} / {cv[task].ece:.3f} / "
                f"{cv[task].confident_wrong}"
                for task in ("B", "A")
            ]
            print(f"  {form} l2 {l2:g}: " + " | ".join(cells))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
