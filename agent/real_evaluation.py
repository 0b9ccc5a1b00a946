"""Figures of a policy's answers per task and corpus part: n, positives, accuracy, balanced
accuracy, positive-class F1, expected calibration error (10 bins), wrong answers at confidence
>= 0.9 and the triage curve (the F1, or accuracy where a part has no positive, of the decisions
kept when the least confident 0/10/20/30 % are deferred to experts).

The evaluation job, the ``evaluate`` command and the vetted evaluation part compute their tables
here; ``agent.bench.real`` prints the rule-based inspector's with them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from agent.calibration import expected_calibration_error, reliability_bins
from agent.metrics import classification_report
from agent.real_corpus import load_corpus

if TYPE_CHECKING:
    from agent.evaluation import EvalSample, SampleResult

DEFERRALS = (0.0, 0.1, 0.2, 0.3)
CONFIDENT = 0.9
# the rule-based inspector's figures before a change, kept as data with the version that
# produced them: the benchmark and the evaluation page show them beside the current ones
BASELINE_PATH = Path(__file__).resolve().parent / "data" / "real_baseline.json"
FIGURES = ("n", "positives", "accuracy", "balanced_accuracy", "f1", "ece", "confident_wrong")


@dataclass(frozen=True)
class PartReport:
    n: int
    positives: int
    accuracy: float
    balanced_accuracy: float
    f1: float | None  # None without positives
    ece: float
    confident_wrong: int
    triage: tuple[tuple[float, float], ...]  # (deferral, F1 of what is kept; NaN undefined)


def part_report(
    labels: Sequence[str],
    predictions: Sequence[str | None],
    confidences: Sequence[float | None],
) -> PartReport:
    """Figures of one part from answers (None: no answer, counted wrong) and the confidence in
    each answer; without a confidence for every answer, ECE and the triage curve are NaN."""
    correct = [p == y for p, y in zip(predictions, labels, strict=True)]
    summary = classification_report(list(labels), list(predictions))
    positives = list(labels).count("YES")
    tpr = _rate(predictions, labels, "YES")
    tnr = _rate(predictions, labels, "NO")
    balanced = float(np.mean([r for r in (tpr, tnr) if r is not None])) if labels else math.nan
    known = [c for c in confidences if c is not None]
    if labels and len(known) == len(labels):
        ece = expected_calibration_error(reliability_bins(known, correct, n_bins=10))
        triage = _triage(labels, predictions, known, positives > 0)
    else:
        ece, triage = math.nan, tuple((deferral, math.nan) for deferral in DEFERRALS)
    return PartReport(
        n=len(labels),
        positives=positives,
        accuracy=summary.accuracy,
        balanced_accuracy=balanced,
        f1=summary.f1 if positives else None,
        ece=ece,
        confident_wrong=sum(
            1
            for c, ok in zip(confidences, correct, strict=True)
            if c is not None and c >= CONFIDENT and not ok
        ),
        triage=triage,
    )


def report_figures(report: PartReport) -> dict[str, Any]:
    """The figures of a part as JSON values (NaN and undefined as None, 4 decimals)."""
    values: dict[str, Any] = {}
    for key in FIGURES:
        value = getattr(report, key)
        if isinstance(value, float):
            value = None if math.isnan(value) else round(value, 4)
        values[key] = value
    return values


@dataclass(frozen=True)
class Baseline:
    """Figures measured earlier, with what produced them."""

    inspector: str  # the policy's model name and version, e.g. "rule-based/v2"
    code_commit: str
    command: str
    measured_on: str
    corpus_version: int
    note: str
    figures: dict[str, dict[str, dict[str, Any]]]  # task -> part -> FIGURES
    confident_wrong: tuple[dict[str, Any], ...]  # task, part, item, label, confidence, subclass

    def part(self, task: str, part: str) -> dict[str, Any] | None:
        return self.figures.get(task, {}).get(part)


def load_baseline(path: Path = BASELINE_PATH) -> Baseline | None:
    """The stored baseline figures; None when the file is absent."""
    if not path.exists():
        return None
    data = json.loads(path.read_text(encoding="utf-8"))
    return Baseline(
        inspector=str(data["inspector"]),
        code_commit=str(data["code_commit"]),
        command=str(data["command"]),
        measured_on=str(data["measured_on"]),
        corpus_version=int(data["corpus_version"]),
        note=str(data.get("note", "")),
        figures={
            task: {part: dict(values) for part, values in parts.items()}
            for task, parts in data["figures"].items()
        },
        confident_wrong=tuple(dict(row) for row in data.get("confident_wrong", [])),
    )


def _rate(predictions: Sequence[str | None], labels: Sequence[str], value: str) -> float | None:
    chosen = [p == value for p, y in zip(predictions, labels, strict=True) if y == value]
    return float(np.mean(chosen)) if chosen else None


def _triage(
    labels: Sequence[str],
    predictions: Sequence[str | None],
    confidences: Sequence[float],
    f1: bool,
) -> tuple[tuple[float, float], ...]:
    """F1 (or accuracy without positives) of the most confident (1 - d) share, for each d."""
    order = sorted(range(len(labels)), key=lambda i: -confidences[i])
    points = []
    for deferral in DEFERRALS:
        kept = order[: max(int(math.ceil((1.0 - deferral) * len(order))), 1)] if order else []
        kept_labels = [labels[i] for i in kept]
        report_ = classification_report(kept_labels, [predictions[i] for i in kept])
        if f1 and "YES" not in kept_labels:
            points.append((deferral, math.nan))  # every positive deferred: F1 undefined
        else:
            points.append((deferral, report_.f1 if f1 else report_.accuracy))
    return tuple(points)


def _fmt(value: float | None) -> str:
    return (
        "   —"
        if value is None or (isinstance(value, float) and math.isnan(value))
        else f"{value:.2f}"
    )


# --- any policy: its answers on the real corpus beside its answers on a benchmark ---------------


def real_eval_samples(split: str, tasks: Sequence[str]) -> list[EvalSample]:
    """One evaluation sample per (real spectrum, task it has a label for) of a corpus part;
    raises ``agent.real_corpus.CorpusUnavailable`` when the cache has not been built."""
    from agent.evaluation import EvalSample

    samples = []
    for entry, spectrum in load_corpus(split):
        for task in tasks:
            label = entry.label(task)
            if label is not None:
                samples.append(EvalSample(f"{entry.id}-{task}", task, label, spectrum))
    return samples


def side_by_side(
    results: Mapping[str, Sequence[SampleResult]], tasks: Sequence[str]
) -> dict[str, dict[str, PartReport]]:
    """task -> part -> figures, from each part's evaluation results (parts keep their order)."""
    table: dict[str, dict[str, PartReport]] = {}
    for task in tasks:
        table[task] = {}
        for part, rows in results.items():
            chosen = [r for r in rows if r.task == task]
            if chosen:
                table[task][part] = part_report(
                    [r.label for r in chosen],
                    [r.prediction for r in chosen],
                    [r.confidence for r in chosen],
                )
    return table


TABLE_TITLE = (
    "Rule-based inspector, calibrated on the real development part "
    "(synthetic = SpecVI-mini, SYNTHETIC)"
)


def format_table(
    table: dict[str, dict[str, PartReport]],
    title: str = TABLE_TITLE,
    baseline: Baseline | None = None,
) -> str:
    """The table; with ``baseline``, each row also shows the old balanced accuracy, F1, ECE and
    wrong answers at >= 0.9 of the same task and part (the inspector version in the header)."""
    old_head = f" | old {'bacc':>5} {'F1':>5} {'ECE':>5} {'wrong':>5}" if baseline else ""
    lines = [title]
    if baseline is not None:
        lines.append(
            f"old = {baseline.inspector} at {baseline.code_commit} ({baseline.measured_on}, "
            f"{baseline.command})"
        )
    lines.append(
        f"{'task':<4} {'part':<12} {'n':>4} {'pos':>4} {'acc':>5} {'bacc':>5} {'F1':>5} "
        f"{'ECE':>5} {'wrong@0.9':>9}{old_head} | triage F1 (acc w/o pos) at deferral "
        "0/10/20/30 %"
    )
    for task, parts in table.items():
        for part, r in parts.items():
            old = ""
            if baseline is not None:
                figures = baseline.part(task, part)
                old = (
                    f" |     {_fmt(figures['balanced_accuracy']):>5} {_fmt(figures['f1']):>5} "
                    f"{_fmt(figures['ece']):>5} {figures['confident_wrong']:>5}"
                    if figures
                    else f" |     {'—':>5} {'—':>5} {'—':>5} {'—':>5}"
                )
            triage = " ".join(_fmt(value) for _, value in r.triage)
            lines.append(
                f"{task:<4} {part:<12} {r.n:>4} {r.positives:>4} {_fmt(r.accuracy):>5} "
                f"{_fmt(r.balanced_accuracy):>5} {_fmt(r.f1):>5} {_fmt(r.ece):>5} "
                f"{r.confident_wrong:>9}{old} | {triage}"
            )
    return "\n".join(lines)
