"""The million-row benchmark verifies every operation before printing a figure, and the refit
and the re-route after it read the run's candidates in bounded memory (issue 34, goal 5).

Memory is compared between two sizes measured in the same test (a ratio), never a time.
"""

from __future__ import annotations

import io
import tracemalloc
from collections.abc import Callable
from typing import Any

import pytest

from annotation.bench import million
from annotation.inspections.models import Candidate, CatalogEntry, InspectionRun
from annotation.learning import selectors as learning_selectors
from annotation.learning import services as learning_services
from annotation.spectra.models import Spectrum, SpectrumLabel, Task

pytestmark = pytest.mark.django_db


def test_it_verifies_each_operation_at_each_size_then_prints_the_growth_and_cleans_up() -> None:
    out = io.StringIO()
    figures = million.main(["--rows", "200", "2000", "--repeats", "1"], out=out)
    text = out.getvalue()
    for operation in million.OPERATIONS:
        assert text.count(f"verified: {operation.name}:") == 2
        assert operation.name in figures[2000]
    table = text[text.index("operation") :].splitlines()
    assert len(table) == 1 + len(million.OPERATIONS) + 1
    assert all(line.split()[-3] == "10.0" for line in table[1:-1])  # the rows' ratio
    assert not Candidate.objects.exists() and not CatalogEntry.objects.exists()
    assert not Spectrum.objects.exists() and not SpectrumLabel.objects.exists()
    assert not InspectionRun.objects.exists()
    assert not Task.objects.filter(code__startswith="BM").exists()


@pytest.mark.parametrize(
    ("name", "wrong", "operation"),
    [
        ("reference_next", lambda data: (-5, 0), "vetting queue"),
        ("reference_page", lambda data, **kw: [1, 2, 3], "catalog page, default sort"),
        ("reference_fit", lambda data: (1, 0, None), "calibration refit"),
        ("reference_with_experts", lambda data, slope, intercept: -1, "re-route"),
        ("reference_purity", lambda data, seed: (0.5, None, None), "re-route, target"),
        ("reference_with_experts_at", lambda data, fit, at: -1, "re-route, target"),
    ],
)
def test_it_refuses_to_print_a_figure_when_a_result_differs_from_the_reference(
    monkeypatch, name: str, wrong: Callable[..., Any], operation: str
) -> None:
    monkeypatch.setattr(million, name, wrong)
    out = io.StringIO()
    with pytest.raises(SystemExit, match="verification failed"):
        million.main(["--rows", "300", "--repeats", "1"], out=out)
    assert f"verified: {operation}" not in out.getvalue()
    assert not Candidate.objects.exists()


def _peak(call: Callable[[], Any]) -> int:
    tracemalloc.start()
    try:
        call()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _refit_and_reroute_peaks(rows: int) -> tuple[int, int]:
    bench, _ = million.load(rows, seed=1)
    try:
        key = bench.run.model_key
        refit = _peak(
            lambda: learning_services.calibration_refit(task=bench.task, model_key=key, actor=None)
        )
        fit = learning_selectors.fit_for(task_id=bench.task.pk, model_key=key)
        assert fit is not None
        reroute = _peak(
            lambda: learning_services.triage_apply(
                task=bench.task, model_key=key, fit=fit, actor=None
            )
        )
        return refit, reroute
    finally:
        million.remove(bench)


def test_the_refit_and_the_re_route_do_not_hold_the_run_s_candidates(monkeypatch) -> None:
    """Ten times the candidates (the labelled ones fixed at 40) must not take ten times the
    memory (under 3x): the refit reads only the labelled candidates, the re-route streams the rest in
    chunks. Before, both held every candidate as a dict (peak ~7x at 4,000 against 400)."""
    monkeypatch.setattr(million, "LABELLED_SHARE", 0.0)
    monkeypatch.setattr(learning_selectors, "MODEL_CANDIDATES_CHUNK", 100)
    monkeypatch.setattr(learning_services, "ROUTE_CHUNK", 100)
    real_generate = million.generate

    def forty_labelled(rows: int, seed: int) -> million.Generated:
        data = real_generate(rows, seed)
        data.labelled[:] = False
        data.labelled[: 2 * 40 : 2] = True
        data.verdict[: 2 * 40] = "YES"
        return data

    monkeypatch.setattr(million, "generate", forty_labelled)
    small_refit, small_reroute = _refit_and_reroute_peaks(400)
    large_refit, large_reroute = _refit_and_reroute_peaks(4000)
    assert large_refit < 3 * small_refit, (small_refit, large_refit)
    assert large_reroute < 3 * small_reroute, (small_reroute, large_reroute)
