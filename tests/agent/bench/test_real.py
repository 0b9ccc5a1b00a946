"""The figure helpers of agent/bench/real.py, checked against hand-computed values (the corpus
itself is exercised in test_real_corpus.py)."""

from __future__ import annotations

import math

import pytest

from agent.evaluation import SampleResult
from agent.real_evaluation import format_table, part_report, side_by_side

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
        items.append((f"item-{index}", drawn.spectrum, dict.fromkeys(tasks, "NO")))
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
