"""The figure helpers of agent/bench/real.py, checked against hand-computed values (the corpus
itself is exercised in test_real_corpus.py)."""

from __future__ import annotations

import math

import pytest

from agent.bench.real import Scored, confident_wrong, format_wrong
from agent.calibration import calibrator_from_dict
from agent.evaluation import SampleResult
from agent.real_evaluation import (
    Baseline,
    format_table,
    load_baseline,
    part_report,
    report_figures,
    side_by_side,
)

LABELS = ["YES", "YES", "NO", "NO"]
PREDICTIONS: list[str | None] = ["YES", "NO", "NO", "YES"]
CONFIDENCES: list[float | None] = [0.92, 0.6, 0.95, 0.7]


def _result(task: str, label: str, prediction: str | None, confidence: float | None):
    return SampleResult(
        sample_id=f"{task}-{label}-{prediction}-{confidence}",
        task=task,
        label=label,
        prediction=prediction,
        confidence=confidence,
        n_tool_calls=0,
        format_ok=True,
        stop_reason="answer",
        call_kinds=[],
        call_outcomes=[],
        seconds=0.0,
        trajectory_id="t",
    )


def test_it_reports_a_part_from_answers_and_confidences() -> None:
    report = part_report(LABELS, PREDICTIONS, CONFIDENCES)
    assert (report.n, report.positives) == (4, 2)
    assert report.accuracy == pytest.approx(0.5)
    assert report.balanced_accuracy == pytest.approx(0.5)  # (1/2 + 1/2) / 2
    assert report.f1 == pytest.approx(0.5)  # 2 TP / (2 TP + FP + FN) = 2 / 4
    # bins: {0.92, 0.95} all right (|1 - 0.935| x 2/4), {0.6} wrong (0.6/4), {0.7} wrong (0.7/4)
    assert report.ece == pytest.approx(0.065 / 2 + 0.15 + 0.175)
    assert report.confident_wrong == 0
    # keeping the 4 (deferral 0-20 %) or 3 most confident (30 %): F1 1/2, then 2 / (2 + 1)
    assert [value for _, value in report.triage] == pytest.approx([0.5, 0.5, 0.5, 2 / 3])


def test_it_counts_a_missing_answer_wrong_and_leaves_ece_undefined_without_confidences() -> None:
    report = part_report(["YES", "NO"], [None, "NO"], [None, 0.97])
    assert report.accuracy == pytest.approx(0.5)
    assert report.balanced_accuracy == pytest.approx(0.5)
    assert math.isnan(report.ece)
    assert all(math.isnan(value) for _, value in report.triage)


def test_it_counts_confident_wrong_answers() -> None:
    report = part_report(["NO", "NO"], ["YES", "NO"], [0.93, 0.55])
    assert report.confident_wrong == 1
    assert report.f1 is None  # no positive: F1 undefined


def test_it_puts_each_part_beside_the_others_per_task() -> None:
    results = {
        "synthetic": [
            _result("MG", y, p, c) for y, p, c in zip(LABELS, PREDICTIONS, CONFIDENCES, strict=True)
        ],
        "development": [_result("MG", "NO", "NO", 0.8), _result("WD", "NO", "YES", 0.95)],
        "validation": [_result("MG", "YES", "YES", 0.9)],
    }
    table = side_by_side(results, ["MG", "WD"])
    assert list(table["MG"]) == ["synthetic", "development", "validation"]
    assert list(table["WD"]) == ["development"]
    assert table["MG"]["synthetic"] == part_report(LABELS, PREDICTIONS, CONFIDENCES)
    assert table["WD"]["development"].confident_wrong == 1
    text = format_table(table, "title here")
    lines = text.splitlines()
    assert lines[0] == "title here"
    assert [line.split()[:3] for line in lines[2:]] == [
        ["MG", "synthetic", "4"],
        ["MG", "development", "1"],
        ["MG", "validation", "1"],
        ["WD", "development", "1"],
    ]


def test_it_scores_each_spectrum_for_each_task_as_a_lone_episode_would() -> None:
    """score_spectra measures each spectrum once for all tasks (a shared SpectrumView): every
    stored score must still be the one a fresh episode of that very spectrum gives (swapped or
    leaked measurements would fail here), and a view of another spectrum is refused."""
    import numpy as np

    from agent.bench.real import score_spectra
    from agent.inspection_tasks import get_task
    from agent.policies.rule_based import RuleBasedInspector, SpectrumView
    from agent.synthetic import generate_sample

    tasks = ("CV", "MG", "A")
    items = []
    for index, (task, label) in enumerate([("CV", True), ("MG", True), ("A", False)]):
        drawn = generate_sample(task, label, rng=np.random.default_rng(index))
        labels: dict[str, str | None] = dict.fromkeys(tasks, "NO")
        items.append((f"item-{index}", drawn.spectrum, labels))
    scored = score_spectra(items, tasks)
    assert len(scored) == len(items) * len(tasks)
    inspector = RuleBasedInspector(calibration=None)
    spectra = {item: spectrum for item, spectrum, _ in items}
    for row in scored:
        alone = inspector.begin(spectrum=spectra[row.item], task=get_task(row.task), use_tool=False)
        assert alone.decision is not None
        assert row.score == pytest.approx(float(alone.decision["score"]), abs=1e-9), row
    other = SpectrumView(items[1][1])
    with pytest.raises(ValueError, match="another spectrum"):
        inspector.begin(spectrum=items[0][1], task=get_task("CV"), view=other)


def _baseline(figures: dict) -> Baseline:
    return Baseline(
        inspector="rule-based/v2",
        code_commit="9770741",
        command="python -m agent.bench.real baseline --synthetic 60 --output x.json",
        measured_on="2026-11-27",
        corpus_version=2,
        note="",
        figures=figures,
        confident_wrong=(),
    )


def test_it_prints_the_old_figures_beside_the_new_per_task_and_part() -> None:
    new = part_report(LABELS, PREDICTIONS, CONFIDENCES)
    old = report_figures(part_report(LABELS, ["YES", "YES", "NO", "NO"], [0.99, 0.8, 0.9, 0.6]))
    table = format_table(
        {"B": {"validation": new, "synthetic": new}},
        baseline=_baseline({"B": {"validation": old}}),
    )
    lines = table.splitlines()
    assert "old = rule-based/v2 at 9770741" in lines[1]
    assert "| old  bacc    F1   ECE wrong |" in lines[2]
    validation = next(line for line in lines if line.startswith("B    validation"))
    # new: bacc 0.50, F1 0.50 (hand-computed above); old: all right, bacc 1.00, F1 1.00, and
    # its 0.99 answer right, so none wrong at >= 0.9
    assert validation.split("|")[0].split()[5:9] == ["0.50", "0.50", f"{new.ece:.2f}", "0"]
    assert validation.split("|")[1].split() == ["1.00", "1.00", f"{old['ece']:.2f}", "0"]
    synthetic = next(line for line in lines if line.startswith("B    synthetic"))
    assert synthetic.split("|")[1].split() == ["—", "—", "—", "—"]
    assert "old" not in format_table({"B": {"validation": new}})


def test_it_stores_the_baseline_with_what_produced_it() -> None:
    """The old figures issue 23 reports (validation: balanced accuracy B 0.75, A 0.81, O 0.83;
    9 wrong at >= 0.9 in 5,184 answers), with the inspector version and commit."""
    baseline = load_baseline()
    assert baseline is not None
    assert baseline.inspector == "rule-based/v2" and baseline.code_commit
    assert baseline.command.startswith("python -m agent.bench.real baseline")
    validation = {task: parts["validation"] for task, parts in baseline.figures.items()}
    assert {t: round(validation[t]["balanced_accuracy"], 2) for t in ("B", "A", "O")} == {
        "B": 0.75,
        "A": 0.81,
        "O": 0.83,
    }
    assert sum(v["n"] for v in validation.values()) == 5184
    assert sum(v["confident_wrong"] for v in validation.values()) == 9
    listed = [r for r in baseline.confident_wrong if r["part"] == "validation"]
    assert len(listed) == 9
    for task, parts in baseline.figures.items():
        for part, figures in parts.items():
            named = [r for r in baseline.confident_wrong if (r["task"], r["part"]) == (task, part)]
            assert len(named) == figures["confident_wrong"], (task, part)


def test_it_lists_every_answer_wrong_at_confidence_0_9() -> None:
    identity = {"B": calibrator_from_dict({"method": "Platt", "slope": 1.0, "intercept": 0.0})}
    scored = {
        "validation": [
            Scored("B", "miles-m0720", "YES", -3.0),  # NO at 0.95: wrong, listed
            Scored("B", "x-2", "YES", 3.0),  # right
            Scored("B", "x-3", "NO", 1.0),  # wrong at 0.73: not listed
            Scored("B", "x-4", "NO", 4.0, ("coverage",)),  # pulled to 0.5 + 0.25 * 0.48: 0.62
        ]
    }
    rows = confident_wrong(scored, identity, {"B": 0.25})
    assert [(r.item, r.label, round(r.confidence, 3)) for r in rows] == [
        ("miles-m0720", "YES", 0.953)
    ]
    assert rows[0].subclass == "R..."  # the library's type, from the manifest
    text = format_wrong(rows)
    assert text.splitlines()[0] == "Wrong at confidence >= 0.9: 1"
    assert "miles-m0720 (R...): labelled YES, answered NO at 0.95" in text


@pytest.mark.parametrize("variant", ["knn", "v6"])
def test_it_scores_the_neighbour_combiner_on_objects_it_was_not_fitted_on(variant: str) -> None:
    """v5-knn's and v6's development figures by object folds: every library fit refitted on
    the other folds answers each spectrum; where the vote (whole range for v5-knn, the MK
    region for v6) carries the class, the held-out answers follow it."""
    import random

    from agent.bench.real_cv import cross_validated
    from agent.library_match import TaskEvidence

    rng = random.Random(5)
    rows = []
    for i in range(200):
        positive = i % 4 == 0
        vote = rng.uniform(0.7, 1.0) if positive else rng.uniform(0.0, 0.3)
        other = rng.uniform(0.0, 1.0)  # the vote the variant does not read: noise
        whole, mk = (vote, other) if variant == "knn" else (other, vote)
        found = TaskEvidence("B", rng.uniform(-1.0, 1.0), None, None, 0.5, whole, 15.0, mk, 0.0)
        rows.append(
            Scored(
                "B", f"star-{i}", "YES" if positive else "NO", 0.0, evidence=found, compared=True
            )
        )
    calibration = {"B": calibrator_from_dict({"method": "Platt", "slope": 1.0, "intercept": 0.0})}
    reports = cross_validated(rows, calibration, {"B": 0.75}, variant)
    assert set(reports) == {"B"}  # no A rows: no A figures
    assert reports["B"].n == 200
    assert reports["B"].balanced_accuracy == 1.0
    v4 = cross_validated(rows, calibration, {"B": 0.75}, "combined")
    assert v4["B"].balanced_accuracy < 0.9  # v4's nearest-pair score here is noise


def test_it_puts_one_object_in_one_fold() -> None:
    from agent.bench.real_cv import fold_of

    objects = {"miles-1": "HD1", "stelib-1": "HD1", "miles-2": "HD2"}
    assert fold_of("miles-1", objects, 5) == fold_of("stelib-1", objects, 5)
    assert {fold_of(f"x-{i}", {}, 5) for i in range(50)} == set(range(5))
