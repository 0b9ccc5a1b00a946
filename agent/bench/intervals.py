"""How far a balanced accuracy can be trusted: per task, the inspector's balanced accuracy on
real spectra with a 95% bootstrap interval that resamples whole objects (issue 36).

    python -m agent.bench.intervals                       # the validation part and the outside set
    python -m agent.bench.intervals --parts validation --tasks A,B

The validation part of the real corpus (never used to fit anything) and the typed outside set
(``agent.outside_set``) are answered by the inspector as ``agent.bench.real`` and
``agent.bench.outside`` answer them. A star observed several times counts once per draw, so the
interval is as wide as the number of stars makes it, not the number of spectra. ``target`` says
whether the issue's 0.90 lies below, inside or above the interval: inside, the data cannot tell
whether the target is met.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from dataclasses import dataclass

from agent.bench.outside import answers, corpus_objects, task_decisions
from agent.metrics import balanced_accuracy_interval
from agent.outside_set import OutsideSetUnavailable, load_outside_set
from agent.policies.rule_based import MODEL_NAME, RuleBasedInspector
from agent.real_corpus import CorpusUnavailable, load_corpus, object_key

TASKS = ("O", "B", "A", "MG", "WD")
PARTS = ("validation", "outside")
TARGET = 0.90


@dataclass(frozen=True)
class Row:
    task: str
    group: str  # the object: its spectra are resampled together
    label: str
    prediction: str | None


def validation_rows(inspector: RuleBasedInspector, tasks: Sequence[str]) -> list[Row]:
    rows = []
    for entry, spectrum in load_corpus("validation"):
        match = inspector.library.match(spectrum) if inspector.library is not None else None
        for task, label, found in task_decisions(inspector, spectrum, entry.label, tasks, match):
            rows.append(Row(task, object_key(entry.object), label, found["prediction"]))
    return rows


def outside_rows(inspector: RuleBasedInspector, tasks: Sequence[str]) -> list[Row]:
    found = answers(load_outside_set(), inspector, tasks, corpus_objects())
    return [Row(a.task, a.star, a.label, a.prediction) for a in found]


def where_target(low: float, high: float, target: float = TARGET) -> str:
    if math.isnan(low):
        return "n/a"
    if target < low:
        return "below the interval (met)"
    if target > high:
        return "above the interval (missed)"
    return "inside the interval (cannot tell)"


def table(rows: Sequence[Row], tasks: Sequence[str], title: str) -> str:
    lines = [
        title,
        f"{'task':<4} {'n':>5} {'pos':>4} {'objects':>7} {'bal.acc':>7} {'95% interval':>13}  "
        f"target {TARGET:.2f}",
    ]
    for task in tasks:
        part = [r for r in rows if r.task == task]
        if not part:
            continue
        point, low, high = balanced_accuracy_interval(
            [r.label for r in part], [r.prediction for r in part], [r.group for r in part]
        )
        positives = [r for r in part if r.label == "YES"]
        objects = len({r.group for r in positives})
        interval = "n/a" if math.isnan(low) else f"{low:.3f}-{high:.3f}"
        verdict = where_target(low, high) if positives else "n/a (no positives)"
        lines.append(
            f"{task:<4} {len(part):>5} {len(positives):>4} {objects:>7} {point:>7.3f} "
            f"{interval:>13}  {verdict}"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m agent.bench.intervals", description=__doc__)
    parser.add_argument("--tasks", default=",".join(TASKS))
    parser.add_argument("--parts", default=",".join(PARTS))
    args = parser.parse_args(argv)
    tasks = [t.strip().upper() for t in args.tasks.split(",") if t.strip()]
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    unknown = sorted(set(parts) - set(PARTS))
    if unknown:
        parser.error(f"--parts: unknown {unknown}; choose from {', '.join(PARTS)}")
    inspector = RuleBasedInspector()
    for part in parts:
        try:
            if part == "validation":
                rows = validation_rows(inspector, tasks)
                title = f"{MODEL_NAME} on the validation part (bootstrap over objects, 2,000 draws)"
            else:
                rows = outside_rows(inspector, tasks)
                title = f"{MODEL_NAME} on the outside set (bootstrap over stars, 2,000 draws)"
        except (CorpusUnavailable, OutsideSetUnavailable) as error:
            print(f"{part}: {error}\n`make real-data` and `make outside-data` fetch the spectra")
            return 1
        print(table(rows, tasks, title))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
