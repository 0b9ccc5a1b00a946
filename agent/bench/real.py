"""The rule-based inspector on real spectra beside the synthetic benchmark.

    python -m agent.bench.real                      # the table: task x {dev, validation, synthetic}
    python -m agent.bench.real calibrate            # refit the confidence on the development part
    python -m agent.bench.real baseline --output F  # store this inspector's figures as a baseline

The table shows the stored baseline (``agent/data/real_baseline.json``: the figures of an
earlier inspector version, with its commit) beside the current figures, then lists every answer
wrong at confidence >= 0.9 per part, so what is left can be named. Tables follow for the rules
alone, the library alone, the inspector (rule-based/v7: v4 with A read from the spectral-type
regression of ``agent.type_regression``), and three combinations measured beside it
(rule-based/v4, the inspector before v7; rule-based/v5-knn; rule-based/v6), then the
development part cross-validated by object for v4, v5-knn, v6 and v7 (``agent.bench.real_cv``)
and the CPU per spectrum.

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
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.bench.real_fits import (  # noqa: F401 - Scored and the fits are this bench's names
    KNN_COMBINERS,
    KNN_NAME,
    MIN_POSITIVES,
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
    raw_probability,
)
from agent.calibration import (
    Calibrator,
    calibrator_from_dict,
    fit_beta,
    fit_platt,
)
from agent.inspection_tasks import get_task
from agent.library_match import (
    LIBRARY_VERSION,
    LibraryMatcher,
    decide,
    default_matcher,
)
from agent.policies.rule_based import CALIBRATION_PATH, RuleBasedInspector, SpectrumView
from agent.policies.rule_based.inspector import pulled
from agent.policies.rule_based.library import (
    LIBRARY_CALIBRATION_PATH,
)
from agent.policies.rule_based.scope import DEFAULT_PULL, PULL_GRID, ScopeNote
from agent.policies.rule_based.view import MODEL_NAME
from agent.real_corpus import MANIFEST_PATH, TASKS, load_corpus, load_manifest, object_key
from agent.real_evaluation import (
    CONFIDENT,
    PartReport,
    format_table,
    load_baseline,
    part_report,
    report_figures,
)
from agent.spectra import Spectrum
from agent.type_regression import observed_features

MIN_FOR_BETA = 10
SYNTHETIC_SEED = 20240913
PARTS = ("development", "validation", "synthetic")


def score_spectra(
    items: Sequence[tuple[str, Spectrum, dict[str, str | None]]],
    tasks: Sequence[str] = TASKS,
    *,
    library: LibraryMatcher | None = None,
    leave_out: bool = False,
    timings: dict[str, float] | None = None,
    rules_cache: Path | None = None,
) -> list[Scored]:
    """Raw scores of the uncalibrated inspector; ``items`` are (id, spectrum, {task: label}).
    With ``library`` each spectrum is also compared with the library spectra (once for all
    tasks); ``leave_out`` leaves the spectrum's own object out of the library (the development
    part, whose spectra the library holds). ``rules_cache``: a JSON file of the rules' scores
    and notes from an earlier run of this very code (a development aid, ``--rules-cache``): read
    when present, written when not, so a change of the library part is measured again fast."""
    cached: dict[str, Any] = {}
    if rules_cache is not None and rules_cache.exists():
        cached = json.loads(rules_cache.read_text(encoding="utf-8"))
    clock = timings if timings is not None else {}
    if "_rules_seconds" in cached:  # the cost measured when the cache was written
        clock["rules"] = clock.get("rules", 0.0) + float(cached["_rules_seconds"])
    inspector = RuleBasedInspector(calibration=None, library=None)
    definitions = {task: get_task(task) for task in tasks}
    by_task: dict[str, list[Scored]] = {task: [] for task in tasks}
    objects = {entry.id: object_key(entry.object) for entry in load_manifest()}
    spent = 0.0
    for item, spectrum, labels in items:
        started = time.process_time()
        match = (
            library.match(
                spectrum,
                exclude_object=objects.get(item) if leave_out else None,
                mk_region=True,
                clock=clock,
            )
            if library is not None
            else None
        )
        middle = time.process_time()
        clock["library"] = clock.get("library", 0.0) + middle - started
        typed = observed_features(match)
        view: SpectrumView | None = None
        for task in tasks:
            label = labels.get(task)
            if label is None:
                continue
            key = f"{item}|{task}"
            if key not in cached:
                if view is None:
                    view = SpectrumView(spectrum)  # each line measured once for all the tasks
                decision = inspector.begin(
                    spectrum=spectrum, task=definitions[task], use_tool=False, view=view
                ).decision
                assert decision is not None
                scope = decision["evidence"].get("scope", [])
                cached[key] = [
                    float(decision["score"]),
                    [[note["kind"], note["subject"], note["text"]] for note in scope],
                ]
            score, scope_notes = cached[key]
            notes = tuple(ScopeNote(*note) for note in scope_notes)
            by_task[task].append(
                Scored(
                    task,
                    item,
                    label,
                    float(score),
                    tuple(note.kind for note in notes),
                    notes,
                    decide(match, task) if match is not None else None,
                    library is not None,
                    typed,
                )
            )
        spent += time.process_time() - middle
        clock["spectra"] = clock.get("spectra", 0.0) + 1
    if "_rules_seconds" not in cached:
        clock["rules"] = clock.get("rules", 0.0) + spent
        cached["_rules_seconds"] = spent
    if rules_cache is not None and not rules_cache.exists():
        rules_cache.parent.mkdir(parents=True, exist_ok=True)
        rules_cache.write_text(json.dumps(cached), encoding="utf-8")
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
    grid = PULL_GRID

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


VARIANTS = ("rules", "library", "combined")


def report(
    scored: Sequence[Scored],
    calibration: Mapping[str, Calibrator],
    pulls: Mapping[str, float] | None = None,
    library_fits: Mapping[str, Mapping[str, Any]] | None = None,
    variant: str = "rules",
) -> PartReport:
    """Figures of one part, from the answers as the variant gives them (the library alone: the
    spectra it can decide)."""
    answered = [
        (s.label, p)
        for s in scored
        if (p := probability_yes(s, calibration, pulls, library_fits, variant)) is not None
    ]
    labels = [label for label, _ in answered]
    predictions: list[str | None] = ["YES" if p >= 0.5 else "NO" for _, p in answered]
    return part_report(labels, predictions, [max(p, 1.0 - p) for _, p in answered])


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
    library_fits: Mapping[str, Mapping[str, Any]] | None = None,
    variant: str = "rules",
) -> list[ConfidentWrong]:
    """Every answer wrong at confidence >= CONFIDENT, per part, most confident first."""
    subclasses = {entry.id: entry.subclass for entry in load_manifest()}
    rows = []
    for part, scored in parts.items():
        for s in scored:
            p = probability_yes(s, calibration, pulls, library_fits, variant)
            if p is None:
                continue
            answer = "YES" if p >= 0.5 else "NO"
            confidence = max(p, 1.0 - p)
            if answer != s.label and confidence >= CONFIDENT:
                rows.append(
                    ConfidentWrong(
                        s.task, part, s.item, s.label, confidence, subclasses.get(s.item, "")
                    )
                )
    return sorted(rows, key=lambda r: (PARTS.index(r.part), r.task, -r.confidence, r.item))


def format_wrong(rows: Sequence[ConfidentWrong], title: str = "") -> str:
    lines = [f"{title}Wrong at confidence >= {CONFIDENT:g}: {len(rows)}"]
    for r in rows:
        typed = f" ({r.subclass})" if r.subclass else ""
        lines.append(
            f"  {r.part:<12} {r.task:<3} {r.item}{typed}: labelled {r.label}, answered "
            f"{'NO' if r.label == 'YES' else 'YES'} at {r.confidence:.2f}"
        )
    return "\n".join(lines)


def write_library_calibration(fits: dict[str, dict[str, Any]]) -> None:
    manifest = json.loads(MANIFEST_PATH.read_text(encoding="utf-8"))
    document = {
        "description": "The rules combined with the comparison with real library spectra "
        "(agent.policies.rule_based.library): per task, the library's Platt scaling of "
        "s = D(nearest negative) - D(nearest positive), the combination's weights (rules, "
        "library, intercept) on the log-odds, the out-of-library distance and the pull of "
        "noted answers. Fitted by `python -m agent.bench.real calibrate` on the development "
        "part only, each object left out of its own library.",
        "corpus_version": manifest["version"],
        "library_version": LIBRARY_VERSION,
        "tasks": fits,
    }
    LIBRARY_CALIBRATION_PATH.write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")


@dataclass(frozen=True)
class Run:
    table: dict[str, dict[str, PartReport]]  # the inspector as it answers (combined)
    fits: dict[str, dict[str, Any]]
    wrong: list[ConfidentWrong]
    tables: dict[str, dict[str, dict[str, PartReport]]] = field(default_factory=dict)
    wrongs: dict[str, list[ConfidentWrong]] = field(default_factory=dict)
    library_fits: dict[str, dict[str, Any]] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    # per variant (CV_VARIANTS): the development figures, 5-fold by object
    cv: dict[str, dict[str, PartReport]] = field(default_factory=dict)


def run(
    *,
    synthetic_per_task: int,
    refit: bool,
    rules_cache: Path | None = None,
    parts_wanted: Sequence[str] = PARTS,
) -> Run:
    matcher = default_matcher()
    started = time.process_time()

    def cache_of(part: str) -> Path | None:
        return None if rules_cache is None else rules_cache / f"{part}.json"

    development = score_spectra(
        real_items("development"),
        library=matcher,
        leave_out=True,
        rules_cache=cache_of("development"),
    )
    fits = fit_calibration(development)
    calibration = _platts(fits)
    pulls = {task: float(fit["scope_pull"]) for task, fit in fits.items()}
    library_fits = fit_library(development, calibration, pulls) if matcher is not None else {}
    knn_fits = fit_knn_library(development, calibration, pulls, library_fits)
    v6_fits = fit_knn_library(development, calibration, pulls, library_fits, V6_COMBINERS)
    types = TypeFits(matcher.tiers) if matcher is not None else None
    if types is not None:  # out-of-fold type estimates: what the v7 combiner is fitted on
        development = types.typed_answers(development, own_fold=True)
    v7_fits = fit_knn_library(development, calibration, pulls, library_fits, V7_COMBINERS)
    from agent.bench.real_cv import CV_VARIANTS, cross_validated

    cv = (
        {v: cross_validated(development, calibration, pulls, v, types=types) for v in CV_VARIANTS}
        if matcher is not None
        else {}
    )
    if refit:
        write_calibration(fits)
        write_library_calibration(v7_fits)  # the inspector's combination (rule-based/v7)
    seconds: dict[str, float] = {}
    parts = {"development": development}
    if "validation" in parts_wanted:
        parts["validation"] = score_spectra(
            real_items("validation"),
            library=matcher,
            timings=seconds,
            rules_cache=cache_of("validation"),
        )
        if types is not None:
            types.estimator(frozenset())  # fitted once, before the clock
            types.seconds, types.typed = 0.0, 0
            parts["validation"] = types.typed_answers(parts["validation"], own_fold=False)
            seconds["type"] = types.seconds
            seconds["typed"] = float(types.typed)
    if synthetic_per_task > 0 and "synthetic" in parts_wanted:
        parts["synthetic"] = score_spectra(
            synthetic_items(synthetic_per_task),
            library=matcher,
            rules_cache=cache_of(f"synthetic-{synthetic_per_task}"),
        )
        if types is not None:
            parts["synthetic"] = types.typed_answers(parts["synthetic"], own_fold=False)
    seconds["total"] = time.process_time() - started
    tables: dict[str, dict[str, dict[str, PartReport]]] = {}
    wrongs: dict[str, list[ConfidentWrong]] = {}
    # "combined" is the inspector as it answers (v7's fits); "v4" the inspector before it
    combinations = {"combined": v7_fits, "v4": library_fits, "knn": knn_fits, "v6": v6_fits}
    for variant in (*VARIANTS, *(v for v in combinations if v not in VARIANTS)):
        how, fitted = (
            ("combined", combinations[variant])
            if variant in combinations
            else (variant, library_fits)
        )
        tables[variant] = {
            task: {
                part: report([s for s in rows if s.task == task], calibration, pulls, fitted, how)
                for part, rows in parts.items()
            }
            for task in TASKS
        }
        wrongs[variant] = confident_wrong(parts, calibration, pulls, fitted, how)
    return Run(
        tables["combined"],
        fits,
        wrongs["combined"],
        tables,
        wrongs,
        v7_fits,
        seconds,
        cv,
    )


def v7_fits(matcher: LibraryMatcher, rules_cache: Path | None = None) -> dict[str, dict[str, Any]]:
    """rule-based/v7's library fits (v4's with the type combiner of A), fitted on the
    development part as the bench fits them, for a caller that measures v7 elsewhere (the
    outside set: ``python -m agent.bench.outside --variant v7``)."""
    development = score_spectra(
        real_items("development"), library=matcher, leave_out=True, rules_cache=rules_cache
    )
    fits = fit_calibration(development)
    calibration = _platts(fits)
    pulls = {task: float(fit["scope_pull"]) for task, fit in fits.items()}
    base = fit_library(development, calibration, pulls)
    typed = TypeFits(matcher.tiers).typed_answers(development, own_fold=True)
    return fit_knn_library(typed, calibration, pulls, base, V7_COMBINERS)


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
    parser.add_argument(
        "--rules-cache",
        type=Path,
        help="a folder for the rules' scores of each part, reused when present (a development "
        "aid: delete it when the rules change)",
    )
    parser.add_argument(
        "--parts", default=",".join(PARTS), help="parts to score (development is always scored)"
    )
    args = parser.parse_args(argv)
    if args.command == "baseline" and args.output is None:
        parser.error(
            "baseline needs --output (the stored baseline is never overwritten by default)"
        )
    result = run(
        synthetic_per_task=args.synthetic,
        refit=args.command == "calibrate",
        rules_cache=args.rules_cache,
        parts_wanted=tuple(args.parts.split(",")),
    )
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
    if args.command == "calibrate":
        print(f"wrote {LIBRARY_CALIBRATION_PATH}")
        for task, fit in result.library_fits.items():
            print(f"  {task}: {fit}")
    for variant, title in TITLES.items():
        if variant not in result.tables:
            continue
        old = load_baseline() if variant == "combined" and args.command != "baseline" else None
        print(format_table(result.tables[variant], title=title, baseline=old))
        print(format_wrong(result.wrongs[variant], title=f"{variant}: "))
        print()
    from agent.bench.real_cv import format_cv

    print(format_cv(result.cv))
    print()
    print(_cost_line(result.seconds))
    return 0


TITLES = {
    "rules": "RULES ALONE: the rule-based part, calibrated on the real development part "
    "(synthetic = SpecVI-mini, SYNTHETIC)",
    "library": "LIBRARY ALONE: comparison with real development library spectra (O, B, A, MG; "
    "the development part each object left out of its own library; n = the spectra it decides)",
    "combined": f"COMBINED ({MODEL_NAME}): the inspector as it answers (A reads the spectral-type "
    "regression, V7_COMBINERS)",
    "knn": f"NEIGHBOUR COMBINER ({KNN_NAME}, not the inspector's answers): A and B combine the "
    "rules with the distance-weighted vote of the 5 nearest library spectra (KNN_COMBINERS)",
    "v6": f"MK-REGION TEMPLATE FIT ({V6_NAME}, not the inspector's answers): A and B combine the "
    "rules with the vote of the 5 nearest and the best template per MK letter (chi2) over "
    "3800-4600 Å (V6_COMBINERS)",
    "v4": f"PREVIOUS INSPECTOR ({V4_NAME}, not the inspector's answers since v7): every task "
    "combines the rules with the library's nearest-distance evidence (agent.policies.rule_based."
    "library)",
}


def _cost_line(seconds: Mapping[str, float]) -> str:
    n = seconds.get("spectra", 0.0)
    if not n:
        return "no cost measured"
    rules = seconds.get("rules", 0.0) / n
    library = seconds.get("library", 0.0) / n
    mk = seconds.get("mk", 0.0) / n
    typed = seconds.get("type", 0.0) / max(seconds.get("typed", 0.0), 1.0)
    return (
        f"CPU per validation spectrum (all {len(TASKS)} tasks): rules {1000 * rules:.0f} ms, "
        f"library comparison {1000 * (library - mk):.0f} ms (v4, v5-knn) + MK-region fit "
        f"{1000 * mk:.0f} ms ({V6_NAME}); with the library / rules alone = "
        f"{(rules + library - mk) / rules if rules else math.nan:.2f}x (v4), "
        f"{(rules + library) / rules if rules else math.nan:.2f}x (v6); type regression "
        f"{1000 * typed:.1f} ms per typed spectrum ({V7_NAME}, the inspector: v4's comparison "
        f"and the type regression = "
        f"{(rules + library - mk + typed) / rules if rules else math.nan:.2f}x)"
    )


if __name__ == "__main__":
    raise SystemExit(main())
