"""Issue 37, the decision page: the whole spectrum viewer in the vetting queue and on the
candidate's live page, line labels that never overlap, the tool form after `0`.

The vetting test prints keys and seconds per decision with the full viewer in the queue, the
queue page's load and the time to a drawn plot (no timed assertion: the machine may be loaded).
Set SPECVET_SCREENSHOT_DIR to keep the screenshots.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest
from django.test import Client
from playwright.sync_api import Page, expect

from annotation.inspections.models import Candidate, ExpertDecision
from annotation.spectra import services as spectra_services
from annotation.spectra.models import Spectrum, Task
from tests.e2e.conftest import BrowserPages
from tests.factories import UserFactory, make_spectrum

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

LAMOST_G7 = (
    Path(__file__).resolve().parents[2].parent
    / "shared"
    / "data"
    / "lamost"
    / "spec-55859-F5902_sp01-001_dr7.fits.gz"
)
# Not one of _queue's seeds (0, 1, ...): the same pixels are one stored spectrum, and a queued
# spectrum would come back as this unlabelled one (a clone without ../shared ran into it).
VIEWER_SEED = 7919
PLOT = "document.getElementById('spectrum-plot')"
READY = "#spectrum-plot[data-viewer-ready][data-workbench-ready]"
FITTED = "#spectrum-plot[data-fit-ready]"
LOAD_TIMEOUT_MS = 60_000  # the first page builds the redshift templates (seconds, once)


def _shot(page: Page, name: str) -> None:
    folder = os.environ.get("SPECVET_SCREENSHOT_DIR")
    if folder:
        page.screenshot(path=str(Path(folder) / f"{name}.png"), full_page=True)


def _real_or_synthetic() -> Spectrum:
    """The real LAMOST G7 star where the checkout has it (a crowded line list over 3,700-9,100
    Å), else a synthetic spectrum over the same range."""
    if LAMOST_G7.exists():
        return spectra_services.spectra_import_path(path=LAMOST_G7, dataset="lamost").created[0]
    return make_spectrum(object_id="VIEWER-1", seed=VIEWER_SEED)


def _queue(expert: Any, capture: Any, n: int = 4) -> None:
    """n candidates of a rule-based CV run that all wait for an expert (threshold 0.99)."""
    cv = Task.objects.get(code="CV")
    for index in range(n):
        make_spectrum(object_id=f"Q{index}", task=cv, label="YES", seed=index)
    client = Client()
    client.force_login(expert)
    data = {
        "task": "CV", "labelled_for_task": "on", "limit": 10, "policy": "rule-based",
        "temperature": 0, "rollouts": 1, "max_tool_calls": 8, "confidence_threshold": 0.99,
    }  # fmt: skip
    with capture(execute=True):
        response = client.post("/inspections/new/", data)
    # Seen once in a full CI run (not alone): no run was made; say why if it happens again.
    form = response.context["form"] if response.context else None
    assert response.status_code == 302, (response.status_code, form.errors if form else None)


def _label_boxes(page: Page) -> list[dict[str, Any]]:
    """Every annotation drawn on the plot: its text, screen box, font size and transform."""
    return page.evaluate(
        f"""() => [...{PLOT}.querySelectorAll('g.annotation')].map(g => {{
            const text = g.querySelector('text');
            const r = (text || g).getBoundingClientRect();
            return {{ text: text ? text.textContent : '', x: r.x, y: r.y, w: r.width, h: r.height,
                      size: text ? parseFloat(getComputedStyle(text).fontSize) : 0,
                      rotated: [...g.innerHTML.matchAll(/rotate\\((-?[0-9.]+)/g)]
                        .some(m => Number(m[1]) !== 0) }};
        }}).filter(b => b.text && b.w > 0)"""
    )


def _assert_apart_and_readable(boxes: list[dict[str, Any]], where: str) -> None:
    assert boxes, f"{where}: no label drawn"
    for box in boxes:
        assert box["size"] >= 10, f"{where}: {box['text']!r} is {box['size']} px"
        assert not box["rotated"], f"{where}: {box['text']!r} is rotated"
    for i, a in enumerate(boxes):
        for b in boxes[i + 1 :]:
            apart = (
                a["x"] + a["w"] <= b["x"] + 0.5
                or b["x"] + b["w"] <= a["x"] + 0.5
                or a["y"] + a["h"] <= b["y"] + 0.5
                or b["y"] + b["h"] <= a["y"] + 0.5
            )
            assert apart, f"{where}: {a['text']!r} overlaps {b['text']!r} ({a}, {b})"


def test_it_brings_the_whole_viewer_into_the_vetting_queue(
    pages: BrowserPages, django_capture_on_commit_callbacks
) -> None:
    expert = UserFactory(username="fleming", roles=["ml_engineer", "expert"])
    _queue(expert, django_capture_on_commit_callbacks)
    page = pages.open("fleming", expert)
    page.set_viewport_size({"width": 1440, "height": 1000})
    started = time.perf_counter()
    page.goto("/vetting/", timeout=LOAD_TIMEOUT_MS)
    expect(page.locator(READY)).to_be_attached(timeout=LOAD_TIMEOUT_MS)
    first_plot = time.perf_counter() - started

    # The spectrum page's viewer: controls, workbench panels, metadata, line markers, template.
    expect(page.locator(".viewer-controls")).to_be_visible()
    expect(page.locator(".workbench-controls")).to_be_visible()
    expect(page.locator("[data-workbench=fit-shown]")).to_contain_text(
        "z = ", timeout=LOAD_TIMEOUT_MS
    )
    expect(page.locator(".viewer-meta-box")).to_be_attached()
    assert page.evaluate(f"{PLOT}._fullLayout.shapes.some(s => s.name === 'line-marker')")
    assert page.evaluate(f"{PLOT}._fullLayout.shapes.some(s => s.name === 'inspected')")
    # Its keys: ] smooths, m hides the lines, + zooms and Home shows the whole spectrum again;
    # . steps to the fit's next alternative and moves the line markers to its z.
    page.keyboard.press("]")
    page.wait_for_function(f"{PLOT}.dataset.smoothing === 'gaussian:3'")
    page.keyboard.press("m")
    page.wait_for_function(f"!{PLOT}._fullLayout.shapes.some(s => s.name === 'line-marker')")
    page.keyboard.press("m")
    page.wait_for_function(f"{PLOT}._fullLayout.shapes.some(s => s.name === 'line-marker')")
    whole = page.evaluate(f"{PLOT}._fullLayout.xaxis.range.slice()")
    page.keyboard.press("+")
    page.wait_for_function(
        f"(w) => {PLOT}._fullLayout.xaxis.range[1] - {PLOT}._fullLayout.xaxis.range[0] < (w[1] - w[0]) * 0.8",
        arg=whole,
    )
    page.keyboard.press("Home")
    page.wait_for_function(
        f"(w) => Math.abs({PLOT}._fullLayout.xaxis.range[0] - w[0]) < 1e-6", arg=whole
    )
    if page.locator("[data-workbench=fit-next]:enabled").count():
        before = page.evaluate(f"{PLOT}.dataset.fitRank")
        page.keyboard.press(".")
        page.wait_for_function(f"(r) => {PLOT}.dataset.fitRank !== r", arg=before)
    # 0-4 keep setting the quality in the queue (the viewer's "whole spectrum" is Home there).
    page.keyboard.press("0")
    expect(page.locator("input[name=quality][value='0']")).to_be_checked()
    page.keyboard.press("?")
    expect(page.locator("#key-sheet")).to_contain_text("whole spectrum")
    expect(page.locator("#key-sheet")).to_contain_text("more smoothing")
    page.keyboard.press("Escape")
    _shot(page, "vetting_queue_full_viewer")

    # Keys and seconds per decision, the quality and flag keys as in issue 26's figure.
    head = page.locator(".page-head p.muted")
    presses = ("3y", "4n", "2wy", "1bwu")
    keys = 0
    drawn: list[float] = []
    seconds = 0.0  # from the first key to the next candidate's page, as issue 26 measured it
    for remaining, sequence in zip((4, 3, 2, 1), presses, strict=True):
        expect(head).to_contain_text(f"{remaining} candidate")
        pressed = time.perf_counter()
        for key in sequence:
            page.keyboard.press(key)
            keys += 1
        expect(head).to_contain_text(
            f"{remaining - 1} candidate" if remaining > 1 else "0 candidates",
            timeout=LOAD_TIMEOUT_MS,
        )
        seconds += time.perf_counter() - pressed
        if remaining > 1:
            expect(page.locator(READY)).to_be_attached(timeout=LOAD_TIMEOUT_MS)
            drawn.append(time.perf_counter() - pressed)
    stored = sorted(
        ExpertDecision.objects.filter(expert=expert).values_list("decision", "quality", "issues")
    )
    assert stored == sorted(
        [("YES", 3, []), ("NO", 4, []), ("YES", 2, ["low_snr"]), ("unsure", 1, ["sky", "low_snr"])]
    )
    page.keyboard.press("z")  # undo the last: its candidate comes back, with the viewer
    # The undone candidate's page, then its viewer.
    expect(head).to_contain_text("1 candidate", timeout=LOAD_TIMEOUT_MS)
    expect(page.locator(READY)).to_be_attached(timeout=LOAD_TIMEOUT_MS)
    loads, plotted, plots, fits = [], [], [], []
    for _ in range(4):
        started = time.perf_counter()
        page.goto("/vetting/", timeout=LOAD_TIMEOUT_MS)
        expect(head).to_contain_text("1 candidate")
        loads.append(time.perf_counter() - started)
        expect(page.locator("#spectrum-plot[data-plot-ready]")).to_be_attached()
        plotted.append(time.perf_counter() - started)
        expect(page.locator(READY)).to_be_attached(timeout=LOAD_TIMEOUT_MS)
        plots.append(time.perf_counter() - started)
        expect(page.locator(FITTED)).to_be_attached(timeout=LOAD_TIMEOUT_MS)
        fits.append(time.perf_counter() - started)
    load = sum(loads) / 4
    print(
        f"\nvetting with the whole viewer: 4 decisions, {keys / 4:.2f} keys per decision, "
        f"{seconds / 4:.2f} s per decision (decision / page load {seconds / 4 / load:.2f}); "
        f"queue page load {load:.2f} s; time to a drawn plot {sum(plotted) / 4:.2f} s, to the "
        f"wired viewer {sum(plots) / 4:.2f} s, to the fit's alternatives {sum(fits) / 4:.2f} s; "
        f"key to the next candidate's wired viewer {sum(drawn) / len(drawn):.2f} s (first page "
        f"of the process {first_plot:.2f} s, redshift templates built)"
    )
    pages.assert_clean()


def test_it_starts_no_redshift_fit_for_a_decision_made_at_once(
    pages: BrowserPages, django_capture_on_commit_callbacks
) -> None:
    """Issue 37: each queue page asked the server for its redshift fit (seconds of CPU) as soon
    as its plot was drawn, and the fits of pages already decided slowed the next decisions. A
    page decided by keys at once asks for none; a page left open still gets its fit."""
    expert = UserFactory(username="cannon", roles=["ml_engineer", "expert"])
    _queue(expert, django_capture_on_commit_callbacks, n=2)
    page = pages.open("cannon", expert)
    asked: list[str] = []
    page.on(
        "request",
        lambda request: asked.append(request.url) if "/viewer-fit/" in request.url else None,
    )
    page.goto("/vetting/", timeout=LOAD_TIMEOUT_MS)
    head = page.locator(".page-head p.muted")
    expect(head).to_contain_text("2 candidates")
    expect(page.locator(READY)).to_be_attached(timeout=LOAD_TIMEOUT_MS)
    page.keyboard.press("y")
    expect(head).to_contain_text("1 candidate", timeout=LOAD_TIMEOUT_MS)
    assert asked == [], f"the page decided at once asked for its fit: {asked}"
    expect(page.locator(FITTED)).to_be_attached(timeout=LOAD_TIMEOUT_MS)
    expect(page.locator("[data-workbench=fit-shown]")).to_contain_text("z = ")
    assert len(asked) == 1, asked
    pages.assert_clean()


def test_it_shows_the_whole_viewer_on_the_candidate_page(
    pages: BrowserPages, django_capture_on_commit_callbacks
) -> None:
    expert = UserFactory(username="fleming", roles=["ml_engineer", "expert"])
    _queue(expert, django_capture_on_commit_callbacks, n=1)
    candidate = Candidate.objects.get()
    page = pages.open("fleming", expert)
    page.set_viewport_size({"width": 1440, "height": 1000})
    page.goto(f"/inspections/candidates/{candidate.pk}/", timeout=LOAD_TIMEOUT_MS)
    expect(page.locator(READY)).to_be_attached(timeout=LOAD_TIMEOUT_MS)
    expect(page.locator(".workbench-controls")).to_be_visible()
    expect(page.locator("[data-viewer=inspected] .inspected-chip").first).to_be_visible()
    page.keyboard.press("]")
    page.wait_for_function(f"{PLOT}.dataset.smoothing === 'gaussian:3'")
    # The whole-spectrum key is 0 here (no quality keys on this page).
    page.keyboard.press("+")
    page.keyboard.press("0")
    expect(page.locator("[data-viewer=zoom-whole][data-key='0']")).to_be_visible()
    pages.assert_clean()


@pytest.mark.parametrize("width", [1440, 1024])
def test_it_keeps_line_labels_apart_and_readable(
    pages: BrowserPages, django_capture_on_commit_callbacks, width: int
) -> None:
    row = _real_or_synthetic()
    expert = UserFactory(username="fleming", roles=["ml_engineer", "expert"])
    _queue(expert, django_capture_on_commit_callbacks, n=1)
    candidate = Candidate.objects.get()
    page = pages.open("fleming", expert)
    page.set_viewport_size({"width": width, "height": 900})
    for where, url in (
        ("spectrum page", f"/spectra/{row.pk}/"),
        ("live page", f"/inspections/candidates/{candidate.pk}/"),
    ):
        page.goto(url, timeout=LOAD_TIMEOUT_MS)
        expect(page.locator(READY)).to_be_attached(timeout=LOAD_TIMEOUT_MS)
        page.wait_for_function(f"{PLOT}.querySelectorAll('g.annotation').length > 0")
        _assert_apart_and_readable(_label_boxes(page), f"{where} at {width} px")
        _shot(page, f"line_labels_{where.replace(' ', '_')}_{width}")
        # Zoomed in, more labels fit (placed again for the range shown), still apart.
        labelled = page.evaluate(f"{PLOT}.dataset.lineLabels")
        page.evaluate(
            f"Plotly.relayout({PLOT}, {{'xaxis.range[0]': 4800, 'xaxis.range[1]': 5300}})"
        )
        page.wait_for_function(f"(l) => {PLOT}.dataset.lineLabels !== l", arg=labelled)
        _assert_apart_and_readable(_label_boxes(page), f"{where} at {width} px, zoomed")
    pages.assert_clean()


def test_it_fills_the_tool_form_with_the_whole_range_after_0(pages: BrowserPages) -> None:
    row = _real_or_synthetic()
    page = pages.open("fleming", UserFactory(username="fleming", roles=["expert"]))
    page.set_viewport_size({"width": 1440, "height": 1000})
    page.goto(f"/spectra/{row.pk}/", timeout=LOAD_TIMEOUT_MS)
    expect(page.locator(READY)).to_be_attached(timeout=LOAD_TIMEOUT_MS)
    whole = page.evaluate(f"{PLOT}._fullLayout.xaxis.range.slice()")
    page.evaluate(f"Plotly.relayout({PLOT}, {{'xaxis.range[0]': 6500, 'xaxis.range[1]': 6600}})")
    expect(page.locator("#render-form [name=lo]")).to_have_value("6500.0")
    page.keyboard.press("0")
    expect(page.locator("#render-form [name=lo]")).to_have_value(f"{whole[0]:.1f}")
    expect(page.locator("#render-form [name=hi]")).to_have_value(f"{whole[1]:.1f}")
    pages.assert_clean()


@pytest.mark.parametrize("width", [1440, 1024, 700])
def test_it_never_breaks_a_model_hash_in_the_catalog(
    pages: BrowserPages, django_capture_on_commit_callbacks, width: int
) -> None:
    from annotation.inspections.models import CatalogEntry, InspectionRun

    expert = UserFactory(username="fleming", roles=["ml_engineer", "expert"])
    _queue(expert, django_capture_on_commit_callbacks, n=2)
    label = "checkpoint sft-run-12-with-a-long-folder-name · 3f2a9c81e0d4"
    for model in (InspectionRun, CatalogEntry):  # the catalog shows the entry's copy
        model.objects.update(model_label=label, model_key="checkpoint:3f2a9c81e0d4b7a6")
    page = pages.open("fleming", expert)
    page.set_viewport_size({"width": width, "height": 900})
    page.goto("/catalog/")
    cell = page.locator(".catalog-table tbody td", has_text="3f2a9c81e0d4").first
    expect(cell).to_contain_text("3f2a9c81e0d4")
    # Each word of the label (the hash among them) lies on one line of the cell; a folder name
    # may wrap after one of its hyphens, as any text does.
    lines = cell.evaluate(
        """td => {
            const text = td.firstChild, words = [], range = document.createRange();
            let start = 0;
            for (const word of text.textContent.split(' ')) {
                range.setStart(text, start); range.setEnd(text, start + word.length);
                const tops = new Set([...range.getClientRects()].map(r => Math.round(r.top)));
                words.push([word, tops.size]);
                start += word.length + 1;
            }
            return words;
        }"""
    )
    broken = [word for word, count in lines if count > 1 and "-" not in word]
    assert any(word == "3f2a9c81e0d4" for word, _ in lines)
    assert not broken, f"at {width} px the Model column breaks {broken} across lines"
    _shot(page, f"catalog_model_column_{width}")
    pages.assert_clean()
