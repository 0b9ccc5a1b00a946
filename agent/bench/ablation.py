"""Evidence ablation of the rule-based inspector's verdicts on the real corpus.

    python -m agent.bench.ablation [--tasks CV MG] [--per-task 40] [--seed 0] [--split validation]

For each task, up to ``--per-task`` real spectra (its positives and hard negatives first, then
other negatives, drawn with ``--seed``) are inspected; each verdict is re-run with its own
evidence windows (zooms and cited lines) replaced by the continuum and, as the control, with
random windows of the same widths masked (``agent.ablation``). Printed per task and in total:
verdicts, confident ones (confidence >= 0.9), how many confident verdicts flip when their own
windows are masked versus random windows, and how many are insensitive (confident, unchanged).
Nothing is timed: the figures are counts.
"""

from __future__ import annotations

import argparse
import random
import sys
from collections.abc import Sequence

from agent.ablation import CONFIDENT, AblationSummary, ablate_verdict
from agent.inspection_tasks import get_task
from agent.policies.rule_based import RuleBasedInspector
from agent.real_corpus import SPLITS, TASKS, CorpusUnavailable, load_corpus
from agent.rollout import inspect


def run(
    *, tasks: Sequence[str], per_task: int, seed: int, split: str | None
) -> dict[str, AblationSummary]:
    corpus = load_corpus(split)
    policy = RuleBasedInspector()
    summaries: dict[str, AblationSummary] = {}
    for code in tasks:
        task = get_task(code)
        rng = random.Random(f"{seed}:{code}")
        related = [
            item for item in corpus if code in item[0].positive_for + item[0].hard_negative_for
        ]
        others = [
            item for item in corpus if item not in related and code not in item[0].excluded_from
        ]
        rng.shuffle(related)
        rng.shuffle(others)
        chosen = (related + others)[:per_task]
        summary = summaries.setdefault(code, AblationSummary())
        for index, (_entry, spectrum) in enumerate(chosen):
            trajectory = inspect(spectrum, task, policy)
            result = ablate_verdict(
                spectrum, task, trajectory, lambda: policy, seed=seed * 100_003 + index
            )
            summary.add(result)
    return summaries


def _rate(part: int, whole: int) -> str:
    return f"{part}/{whole} ({100 * part / whole:.0f} %)" if whole else f"{part}/{whole}"


def report(summaries: dict[str, AblationSummary]) -> str:
    lines = [
        f"Confident: confidence >= {CONFIDENT}. Own: the verdict's own windows masked; control: "
        "random windows of the same widths.",
        f"{'task':<6}{'verdicts':>9}{'confident':>10}  {'confident flipped (own)':<26}"
        f"{'confident flipped (control)':<30}{'insensitive':<16}{'all flipped own / control'}",
    ]
    total = AblationSummary()
    for code, s in summaries.items():
        for name in total.__dataclass_fields__:
            setattr(total, name, getattr(total, name) + getattr(s, name))
        lines.append(_row(code, s))
    lines.append(_row("all", total))
    return "\n".join(lines)


def _row(code: str, s: AblationSummary) -> str:
    return (
        f"{code:<6}{s.n:>9}{s.confident:>10}  {_rate(s.confident_flipped, s.confident):<26}"
        f"{_rate(s.confident_control_flipped, s.confident_control_ran):<30}"
        f"{_rate(s.insensitive, s.confident):<16}"
        f"{s.flipped}/{s.n} vs {s.control_flipped}/{s.control_ran}"
        + (f"  ({s.no_evidence} with nothing to mask)" if s.no_evidence else "")
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m agent.bench.ablation", description=__doc__)
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=TASKS)
    parser.add_argument("--per-task", type=int, default=40)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--split", choices=SPLITS, default=None)
    args = parser.parse_args(argv)
    try:
        summaries = run(tasks=args.tasks, per_task=args.per_task, seed=args.seed, split=args.split)
    except CorpusUnavailable as error:
        print(f"the real corpus is not cached: {error} (python -m agent.real_corpus fetch)")
        return 1
    print(report(summaries))
    return 0


if __name__ == "__main__":
    sys.exit(main())
