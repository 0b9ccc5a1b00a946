"""The rule-based inspector on real spectra beside the synthetic benchmark.

    python -m agent.bench.real                      # the table: task x {dev, validation, synthetic}
    python -m agent.bench.real calibrate            # refit the confidence on the development part
    python -m agent.bench.real baseline --output F  # store this inspector's figures as a baseline

The table shows the stored baseline (``agent/data/real_baseline.json``: the figures of an
earlier inspector version, with its commit) beside the current figures, then lists every answer
wrong at confidence >= 0.9 per part, so what is left can be named.

Per task and part: n, positives, accuracy, balanced accuracy, positive-class F1, expected
calibration error (10 bins) and the wrong answers given with confidence >= 0.9; then the triage
curve on real data: the F1 (accuracy where a part has no positive) of the decisions kept when
the least confident 0/10/20/30 % are deferred to experts.

Calibration (``calibrate``): per task, fitted on the development part only (``fit_calibration``):
beta calibration where both classes have MIN_FOR_BETA members, Platt scaling from MIN_POSITIVES
positives, a temperature (slope <= 1, no intercept) below that; then the pull towards 0.5 of the
answers that carry a scope note (outside what the inspector knows, or the decisive windows
missing), by least log-loss on those development answers, at most MAX_PULL so such an answer
never reaches 0.9. The validation part is never used to fit anything.

Synthetic figures are SpecVI-mini (``agent.synthetic``), labelled "synthetic" everywhere.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.calibration import (
    Calibrator,
    calibrator_from_dict,
    fit_beta,
    fit_platt,
)
from agent.inspection_tasks import get_task
from agent.policies.rule_based import CALIBRATION_PATH, RuleBasedInspector, SpectrumView
from agent.policies.rule_based.inspector import pulled
from agent.policies.rule_based.scope import DEFAULT_PULL, MAX_PULL
from agent.policies.rule_based.view import MODEL_NAME
from agent.real_corpus import MANIFEST_PATH, TASKS, load_corpus, load_manifest
from agent.real_evaluation import (
    CONFIDENT,
    PartReport,
    format_table,
    load_baseline,
    part_report,
    report_figures,
)
from agent.spectra import Spectrum

MIN_POSITIVES = 3
MIN_FOR_BETA = 10
SYNTHETIC_SEED = 20240913
PARTS = ("development", "validation", "synthetic")


@dataclass(frozen=True)
class Scored:
    task: str
    item: str
    label: str  # YES / NO
    score: float  # raw evidence score (log-odds before calibration)
    scope: tuple[str, ...] = ()  # kinds of the scope notes ("out of scope", "coverage")


def score_spectra(
    items: Sequence[tuple[str, Spectrum, dict[str, str | None]]], tasks: Sequence[str] = TASKS
) -> list[Scored]:
    """Raw scores of the uncalibrated inspector; ``items`` are (id, spectrum, {task: label})."""
    inspector = RuleBasedInspector(calibration=None)
    definitions = {task: get_task(task) for task in tasks}
    by_task: dict[str, list[Scored]] = {task: [] for task in tasks}
    for item, spectrum, labels in items:
        view = SpectrumView(spectrum)  # each line measured once for all the tasks
        for task in tasks:
            label = labels.get(task)
            if label is None:
                continue
            decision = inspector.begin(
                spectrum=spectrum, task=definitions[task], use_tool=False, view=view
            ).decision
            assert decision is not None
            evidence = decision["evidence"]
            by_task[task].append(
                Scored(
                    task,
                    item,
                    label,
                    float(decision["score"]),
                    tuple(note["kind"] for note in evidence.get("scope", [])),
                )
            )
    return [row for task in tasks for row in by_task[task]]


def real_items(split: str) -> list[tuple[str, Spectrum, dict[str, str | None]]]:
    return [
        (entry.id, spectrum, {task: entry.label(task) for task in TASKS})
        for entry, spectrum in load_corpus(split)
    ]


def synthetic_items(per_task: int, seed: int = SYNTHETIC_SEED) -> list[tuple[str, Any, Any]]:
    """SpecVI-mini test spectra: ``per_task`` per task, a third of them positives."""
    from agent.synthetic import generate_split

    items = []
    for task in TASKS:
        n_pos = max(per_task // 3, 1)
        for sample in generate_split(task, "test", n_pos=n_pos, n_neg=per_task - n_pos, seed=seed):
            label = "YES" if sample.label else "NO"
            items.append((sample.spectrum.object_id, sample.spectrum, {task: label}))
    return items


def fit_calibration(scored: Sequence[Scored]) -> dict[str, dict[str, Any]]:
    """Per task, on the development part: beta calibration (Kull et al. 2017: two tails, so
    a rare class's wider spread does not bend the common class's probabilities) where both
    classes have at least MIN_FOR_BETA members; Platt scaling from MIN_POSITIVES positives;
    below that a temperature (slope <= 1, no intercept). Both fits use Platt's smoothed targets,
    which keep a rare class from being fitted to certainty."""
    fits: dict[str, dict[str, Any]] = {}
    for task in TASKS:
        rows = [s for s in scored if s.task == task]
        if not rows:
            continue
        labels = [s.label == "YES" for s in rows]
        scores = [s.score for s in rows]
        positives = sum(labels)
        negatives = len(labels) - positives
        if positives >= MIN_FOR_BETA and negatives >= MIN_FOR_BETA:
            beta = fit_beta(scores, labels)
            fit: dict[str, Any] = {
                "method": "beta",
                "a": round(beta.a, 6),
                "b": round(beta.b, 6),
                "c": round(beta.c, 6),
            }
        elif positives >= MIN_POSITIVES:
            platt = fit_platt(scores, labels, intercept=True)
            fit = {
                "method": "Platt",
                "slope": round(platt.slope, 6),
                "intercept": round(platt.intercept, 6),
            }
        else:
            platt = fit_platt(scores, labels, intercept=False)
            fit = {
                "method": "temperature (slope <= 1, no intercept)",
                "slope": round(min(max(platt.slope, 0.1), 1.0), 6),
                "intercept": 0.0,
            }
        fits[task] = {**fit, **_fit_pull(rows, calibrator_from_dict(fit))}
        fits[task].update(n=len(rows), positives=positives)
    return fits


def _fit_pull(rows: Sequence[Scored], calibrator: Calibrator) -> dict[str, Any]:
    """The pull towards 0.5 of the answers with a scope note, by least log-loss over a grid
    in [0, MAX_PULL] on those development answers (DEFAULT_PULL where there are none)."""
    flagged = [s for s in rows if s.scope]
    if not flagged:
        return {"scope_pull": DEFAULT_PULL, "scope_n": 0}
    grid = [round(0.05 * step, 2) for step in range(int(MAX_PULL / 0.05) + 1)]

    def log_loss(pull: float) -> float:
        total = 0.0
        for s in flagged:
            p = min(max(pulled(calibrator(s.score), pull), 1e-6), 1.0 - 1e-6)
            total -= math.log(p if s.label == "YES" else 1.0 - p)
        return total

    return {"scope_pull": min(grid, key=log_loss), "scope_n": len(flagged)}


def write_calibration(fits: dict[str, dict[str, Any]]) -> None:
    manifest = json.loads(MANIFEST_PATH.read_text(encoding="utf-8"))
    document = {
        "description": "Per-task calibration of the rule-based inspector's evidence score s: "
        "beta, P(YES) = logistic(a ln q - b ln(1 - q) + c) with q = logistic(s); Platt or "
        "temperature, P(YES) = logistic(slope * s + intercept). Fitted by `python -m "
        "agent.bench.real calibrate` on the development part of the real corpus only.",
        "corpus_version": manifest["version"],
        "min_positives_for_platt": MIN_POSITIVES,
        "min_per_class_for_beta": MIN_FOR_BETA,
        "tasks": fits,
    }
    CALIBRATION_PATH.write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")


def _platts(fits: dict[str, dict[str, Any]]) -> dict[str, Calibrator]:
    return {task: calibrator_from_dict(fit) for task, fit in fits.items()}


def probability_yes(
    s: Scored, calibration: Mapping[str, Calibrator], pulls: Mapping[str, float] | None = None
) -> float:
    """P(YES) of one answer as the inspector gives it: calibrated, and pulled towards 0.5 when
    it carries a scope note (``pulls``: per task, DEFAULT_PULL where absent)."""
    raw = (
        calibration[s.task](s.score)
        if s.task in calibration
        else 1.0 / (1.0 + math.exp(-max(min(s.score, 40.0), -40.0)))
    )
    return pulled(raw, (pulls or {}).get(s.task, DEFAULT_PULL) if s.scope else 1.0)


def report(
    scored: Sequence[Scored],
    calibration: Mapping[str, Calibrator],
    pulls: Mapping[str, float] | None = None,
) -> PartReport:
    """Figures of one part, from the answers as the inspector gives them."""
    labels = [s.label for s in scored]
    probabilities = [probability_yes(s, calibration, pulls) for s in scored]
    predictions: list[str | None] = ["YES" if p >= 0.5 else "NO" for p in probabilities]
    return part_report(labels, predictions, [max(p, 1.0 - p) for p in probabilities])


@dataclass(frozen=True)
class ConfidentWrong:
    task: str
    part: str
    item: str
    label: str
    confidence: float
    subclass: str  # the library's spectral type ("" for synthetic spectra)


def confident_wrong(
    parts: Mapping[str, Sequence[Scored]],
    calibration: Mapping[str, Calibrator],
    pulls: Mapping[str, float] | None = None,
) -> list[ConfidentWrong]:
    """Every answer wrong at confidence >= CONFIDENT, per part, most confident first."""
    subclasses = {entry.id: entry.subclass for entry in load_manifest()}
    rows = []
    for part, scored in parts.items():
        for s in scored:
            p = probability_yes(s, calibration, pulls)
            answer = "YES" if p >= 0.5 else "NO"
            confidence = max(p, 1.0 - p)
            if answer != s.label and confidence >= CONFIDENT:
                rows.append(
                    ConfidentWrong(
                        s.task, part, s.item, s.label, confidence, subclasses.get(s.item, "")
                    )
                )
    return sorted(rows, key=lambda r: (PARTS.index(r.part), r.task, -r.confidence, r.item))


def format_wrong(rows: Sequence[ConfidentWrong]) -> str:
    lines = [f"Wrong at confidence >= {CONFIDENT:g}: {len(rows)}"]
    for r in rows:
        typed = f" ({r.subclass})" if r.subclass else ""
        lines.append(
            f"  {r.part:<12} {r.task:<3} {r.item}{typed}: labelled {r.label}, answered "
            f"{'NO' if r.label == 'YES' else 'YES'} at {r.confidence:.2f}"
        )
    return "\n".join(lines)


@dataclass(frozen=True)
class Run:
    table: dict[str, dict[str, PartReport]]
    fits: dict[str, dict[str, Any]]
    wrong: list[ConfidentWrong]


def run(*, synthetic_per_task: int, refit: bool) -> Run:
    development = score_spectra(real_items("development"))
    fits = fit_calibration(development)
    if refit:
        write_calibration(fits)
    calibration = _platts(fits)
    pulls = {task: float(fit["scope_pull"]) for task, fit in fits.items()}
    parts = {"development": development, "validation": score_spectra(real_items("validation"))}
    if synthetic_per_task > 0:
        parts["synthetic"] = score_spectra(synthetic_items(synthetic_per_task))
    table: dict[str, dict[str, PartReport]] = {}
    for task in TASKS:
        table[task] = {
            part: report([s for s in rows if s.task == task], calibration, pulls)
            for part, rows in parts.items()
        }
    return Run(table, fits, confident_wrong(parts, calibration, pulls))


def baseline_document(result: Run, *, code_commit: str, measured_on: str, note: str) -> dict:
    """The JSON a baseline is stored as (``agent.real_evaluation.load_baseline`` reads it)."""
    manifest = json.loads(MANIFEST_PATH.read_text(encoding="utf-8"))
    return {
        "description": "Figures of the rule-based inspector on the real corpus (development, "
        "validation) and SpecVI-mini (synthetic), calibrated on the development part, as "
        "measured by the command below at the commit below: the old figures the benchmark "
        "and the evaluation page show beside the current ones.",
        "inspector": MODEL_NAME,
        "code_commit": code_commit,
        "command": "python -m agent.bench.real baseline --synthetic "
        f"{_synthetic_n(result)} --output agent/data/real_baseline.json",
        "measured_on": measured_on,
        "corpus_version": manifest["version"],
        "note": note,
        "figures": {
            task: {part: report_figures(r) for part, r in parts.items()}
            for task, parts in result.table.items()
        },
        "confident_wrong": [
            {
                "task": r.task,
                "part": r.part,
                "item": r.item,
                "subclass": r.subclass,
                "label": r.label,
                "confidence": round(r.confidence, 4),
            }
            for r in result.wrong
        ],
    }


def _synthetic_n(result: Run) -> int:
    counts = [parts["synthetic"].n for parts in result.table.values() if "synthetic" in parts]
    return max(counts) if counts else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m agent.bench.real",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "command", nargs="?", choices=("table", "calibrate", "baseline"), default="table"
    )
    parser.add_argument("--synthetic", type=int, default=60, help="synthetic spectra per task")
    parser.add_argument("--output", type=Path, help="baseline: the JSON file to write")
    parser.add_argument("--commit", default="", help="baseline: the commit of the code measured")
    parser.add_argument("--date", default="", help="baseline: the day it was measured")
    parser.add_argument("--note", default="", help="baseline: what the figures are")
    args = parser.parse_args(argv)
    if args.command == "baseline" and args.output is None:
        parser.error(
            "baseline needs --output (the stored baseline is never overwritten by default)"
        )
    result = run(synthetic_per_task=args.synthetic, refit=args.command == "calibrate")
    if args.command == "calibrate":
        print(f"wrote {CALIBRATION_PATH}")
        for task, fit in result.fits.items():
            print(f"  {task}: {fit}")
    if args.command == "baseline":
        document = baseline_document(
            result, code_commit=args.commit, measured_on=args.date, note=args.note
        )
        args.output.write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {args.output}")
    print(
        format_table(result.table, baseline=None if args.command == "baseline" else load_baseline())
    )
    print(format_wrong(result.wrong))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
