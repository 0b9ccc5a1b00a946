"""The interval benchmark's table: balanced accuracy per task with a bootstrap interval over
objects, and where the issue's 0.90 target lies against it."""

from __future__ import annotations

import pytest

from agent.bench.intervals import Row, main, table, where_target
from agent.metrics import balanced_accuracy_interval


def rows_of(task: str, right_positive_stars: int, wrong_positive_stars: int) -> list[Row]:
    rows = [Row(task, f"P{i}", "YES", "YES") for i in range(right_positive_stars)]
    rows += [Row(task, f"W{i}", "YES", "NO") for i in range(wrong_positive_stars)]
    rows += [Row(task, f"N{i}", "NO", "NO") for i in range(40)]
    return rows


def line(text: str, task: str) -> str:
    return next(row for row in text.splitlines() if row.startswith(f"{task} "))


def test_it_prints_each_task_with_the_interval_the_metric_computes() -> None:
    rows = rows_of("A", 18, 2)
    text = line(table(rows, ["A"], "title"), "A")
    point, low, high = balanced_accuracy_interval(
        [r.label for r in rows], [r.prediction for r in rows], [r.group for r in rows]
    )
    fields = text.split()
    assert fields[:5] == ["A", "60", "20", "20", f"{point:.3f}"]
    assert fields[5] == f"{low:.3f}-{high:.3f}"
    assert point == pytest.approx((18 / 20 + 1.0) / 2)


def test_it_says_where_the_target_lies_against_the_interval() -> None:
    assert where_target(0.91, 0.99) == "below the interval (met)"
    assert where_target(0.80, 0.88) == "above the interval (missed)"
    assert where_target(0.85, 0.95) == "inside the interval (cannot tell)"
    assert "inside" in line(table(rows_of("A", 17, 3), ["A"], "t"), "A")  # 0.925 on 20 stars
    assert "(no positives)" in line(table([Row("O", "N", "NO", "NO")], ["O"], "t"), "O")


def test_it_counts_a_star_seen_twice_once_per_draw() -> None:
    once = rows_of("B", 15, 5)
    twice = once + once  # every star observed twice: no more stars, so no narrower interval

    def interval(rows: list[Row]) -> tuple[float, float, float]:
        return balanced_accuracy_interval(
            [r.label for r in rows], [r.prediction for r in rows], [r.group for r in rows]
        )

    assert interval(twice) == pytest.approx(interval(once))
    singly = [Row(r.task, f"{r.group}-{n}", r.label, r.prediction) for n in (0, 1) for r in once]
    point, low, high = interval(singly)  # the same spectra as independent answers: narrower
    assert high - low < interval(once)[2] - interval(once)[1]


def test_it_refuses_an_unknown_part(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["--parts", "training"])
    assert "unknown ['training']" in capsys.readouterr().err
