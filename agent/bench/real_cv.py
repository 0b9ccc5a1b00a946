"""The development part cross-validated by object for the combinations of the rules with the
library (``python -m agent.bench.real`` prints it): v4's pool, v5-knn's neighbour combiner,
v6's template fit over the MK region and v7's type regression, each with every library fit (the
type regression included) refitted on the other folds.
The development rows of the bench's tables are in-sample; these are what a form is chosen by
(never the validation part)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agent.bench.real_fits import (
    KNN_COMBINERS,
    KNN_NAME,
    V4_NAME,
    V6_COMBINERS,
    V6_NAME,
    V7_COMBINERS,
    V7_NAME,
    Scored,
    TypeFits,
    fit_knn_library,
    fit_library,
    probability_yes,
)
from agent.calibration import Calibrator
from agent.library_match import DECIDABLE
from agent.real_corpus import load_manifest, object_key
from agent.real_evaluation import CONFIDENT, PartReport, part_report

CV_VARIANTS = ("combined", "knn", "v6", "v7")  # v4, v5-knn, v6, v7


def variant_fits(
    variant: str,
    scored: Sequence[Scored],
    calibration: Mapping[str, Calibrator],
    pulls: Mapping[str, float],
    v7_combiners: Mapping[str, tuple[str, float]] = V7_COMBINERS,
) -> dict[str, dict[str, Any]]:
    """The library fits of one combination (``CV_VARIANTS``) fitted on ``scored`` alone."""
    base = fit_library(scored, calibration, pulls)
    if variant == "knn":
        return fit_knn_library(scored, calibration, pulls, base, KNN_COMBINERS)
    if variant == "v6":
        return fit_knn_library(scored, calibration, pulls, base, V6_COMBINERS)
    if variant == "v7":
        return fit_knn_library(scored, calibration, pulls, base, v7_combiners)
    return base


def fold_of(item: str, objects: Mapping[str, str], folds: int) -> int:
    """The fold of a spectrum: a hash of its object's key, so no object is on both sides."""
    import hashlib

    key = objects.get(item, item).encode("utf-8")
    return int(hashlib.sha256(key).hexdigest(), 16) % folds


def cross_validated(
    scored: Sequence[Scored],
    calibration: Mapping[str, Calibrator],
    pulls: Mapping[str, float],
    variant: str,
    folds: int = 5,
    *,
    types: TypeFits | None = None,
    v7_combiners: Mapping[str, tuple[str, float]] = V7_COMBINERS,
) -> dict[str, PartReport]:
    """The development figures of the tasks the library decides, each answer given by the
    library fits of ``variant`` (the platt scaling, the pool or combiner, the pull, the
    out-of-library distance) refitted on the other folds: the development rows of the tables
    are in-sample, these are not. (The rules' own calibration is the development part's.)
    For v7 (``types``) the type regression too: fitted without fold k for its answers, and
    without fold k and their own fold for the answers the combiner is fitted on."""
    objects = {entry.id: object_key(entry.object) for entry in load_manifest()}
    assigned = {s.item: fold_of(s.item, objects, folds) for s in scored}
    answered: dict[str, list[tuple[str, float]]] = {task: [] for task in DECIDABLE}
    for k in range(folds):
        training = [s for s in scored if assigned[s.item] != k]
        testing = [s for s in scored if assigned[s.item] == k]
        if variant == "v7" and types is not None:
            training = types.typed_answers(training, frozenset({k}), own_fold=True)
            testing = types.typed_answers(testing, frozenset({k}), own_fold=False)
        fitted = variant_fits(variant, training, calibration, pulls, v7_combiners)
        for s in testing:
            if s.task in answered:
                p = probability_yes(s, calibration, pulls, fitted, "combined")
                if p is not None:
                    answered[s.task].append((s.label, p))
    return {
        task: part_report(
            [label for label, _ in rows],
            ["YES" if p >= 0.5 else "NO" for _, p in rows],
            [max(p, 1.0 - p) for _, p in rows],
        )
        for task, rows in answered.items()
        if rows
    }


CV_NAMES = {"combined": V4_NAME, "knn": KNN_NAME, "v6": V6_NAME, "v7": V7_NAME}


def format_cv(cv: Mapping[str, Mapping[str, PartReport]]) -> str:
    """The development part cross-validated by object, per task the library decides."""
    lines = [
        "DEVELOPMENT, 5-fold by object (every library fit refitted on the other four folds): "
        f"bacc / ECE / wrong at >= {CONFIDENT:g} of n"
    ]
    for task in DECIDABLE:
        cells = [
            f"{CV_NAMES.get(v, v)} {r.balanced_accuracy:.3f} / {r.ece:.3f} / "
            f"{r.confident_wrong} of {r.n}"
            for v, reports in cv.items()
            if (r := reports.get(task)) is not None
        ]
        if cells:
            lines.append(f"  {task:<3} " + " | ".join(cells))
    return "\n".join(lines)
