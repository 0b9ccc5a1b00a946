"""The spectrum viewer's control bar (issue 15): line list shifted by redshift, smoothing, and
the inspected windows of a candidate that zoom the plot and show the step's image."""

from __future__ import annotations

import os

import pytest
from django.test import Client
from django.urls import reverse
from playwright.sync_api import Page, expect

from agent.real_corpus import LAMOST_DIR
from annotation.inspections.models import Candidate
from annotation.spectra import services as spectra_services
from annotation.spectra.models import Spectrum, Task
from tests.e2e.conftest import BrowserPages
from tests.factories import UserFactory, make_spectrum

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

LAMOST_G7 = LAMOST_DIR / "spec-55859-F5902_sp01-001_dr7.fits.gz"
SCREENSHOT = os.environ.get("SPECVET_VIEWER_SCREENSHOT", "")

PLOT = "document.getElementById('spectrum-plot')"


def _spectrum() -> Spectrum:
    if LAMOST_G7.exists():
        return spectra_services.spectra_import_path(path=LAMOST_G7, dataset="lamost").created[0]
    return make_spectrum(object_id="VIEWER-1")


def _marker_near(page: Page, x: float) -> float:
    return page.evaluate(
        f"(x) => {PLOT}._fullLayout.shapes.filter(s => s.name === 'line-marker')"
        ".map(s => s.x0).reduce((a, b) => Math.abs(b - x) < Math.abs(a - x) ? b : a)",
        x,
    )


def test_it_shifts_the_line_markers_and_smooths_the_flux(pages: BrowserPages) -> None:
    row = _spectrum()
    page = pages.open("fleming", UserFactory(username="fleming", roles=["expert"]))
    page.set_viewport_size({"width": 1500, "height": 1000})
    page.goto(f"/spectra/{row.pk}/")
    expect(page.locator("#spectrum-plot[data-viewer-ready]")).to_be_attached()
    expect(page.locator(".viewer-controls")).to_be_visible()
    expect(page.locator(".viewer-meta")).to_contain_text(row.object_id)

    start = _marker_near(page, 6564.61)
    assert start == pytest.approx(6564.61, abs=0.05)  # H-alpha (vacuum) at the file's z
    assert page.evaluate(f"{PLOT}._fullLayout.shapes.some(s => s.name === 'telluric')")

    page.locator("[data-viewer=z-number]").fill("0.01")
    page.wait_for_function(
        f"Math.abs(Number({PLOT}.dataset.lineShift) - 1.01 / (1 + {row.redshift})) < 1e-9"
    )
    moved = _marker_near(page, 6564.61 * 1.01 / (1 + row.redshift))
    assert moved == pytest.approx(6564.61 * 1.01 / (1 + row.redshift), abs=0.05)
    assert moved - start > 60

    # In km/s the same shift reads cz.
    page.locator("[data-viewer=z-unit]").select_option("kms")
    assert float(page.locator("[data-viewer=z-number]").input_value()) == pytest.approx(
        2997.9, abs=0.2
    )

    page.locator("[data-viewer=smooth]").select_option("gaussian")
    page.wait_for_function(f"{PLOT}.dataset.smoothing === 'gaussian:5'")
    smoothed = page.evaluate(
        f"(() => {{ const n = {PLOT}; const t = n.data[n._specvetFluxIndex + 1];"
        " return [t.visible, t.y.filter(v => v !== null).length]; })()"
    )
    assert smoothed[0] is True and smoothed[1] > 100
    page.locator("[data-viewer=raw]").uncheck()
    page.wait_for_function(f"{PLOT}.data[{PLOT}._specvetFluxIndex].visible === false")
    page.locator("[data-viewer=raw]").check()
    if SCREENSHOT:
        page.screenshot(path=SCREENSHOT, full_page=False)
    pages.assert_clean()


def test_it_zooms_to_an_inspected_window_and_shows_the_steps_image(pages: BrowserPages) -> None:
    cv = Task.objects.get(code="CV")
    make_spectrum(object_id="POS", task=cv, label="YES", seed=1, line_amplitude=3.0)
    user = UserFactory(username="cannon", roles=["ml_engineer"])
    client = Client()
    client.force_login(user)
    client.post(
        reverse("run_create"),
        {
            "task": "CV",
            "labelled_for_task": "on",
            "limit": 10,
            "policy": "rule-based",
            "temperature": 0,
            "rollouts": 1,
            "max_tool_calls": 8,
            "confidence_threshold": 0.99,
        },
    )
    candidate = Candidate.objects.get(spectrum__object_id="POS")
    page = pages.open("cannon", user)
    page.goto(f"/inspections/candidates/{candidate.pk}/")
    expect(page.locator("#spectrum-plot[data-viewer-ready]")).to_be_attached()
    chip = page.locator(".inspected-chip").first
    expect(chip).to_be_visible()
    lo, hi = float(chip.get_attribute("data-lo") or 0), float(chip.get_attribute("data-hi") or 0)
    chip.click()
    page.wait_for_function(
        f"([lo, hi]) => {{ const r = {PLOT}._fullLayout.xaxis.range;"
        " return Math.abs(r[0] - lo) < 1e-6 && Math.abs(r[1] - hi) < 1e-6; }",
        arg=[lo, hi],
    )
    expect(page.locator("#step-view")).to_be_visible()
    assert "/images/" in (page.locator("#step-view img").get_attribute("src") or "")
    expect(page.locator("#steps .step.selected")).to_have_count(1)

    # The window's number on the plot is clickable too.
    page.evaluate(f"Plotly.relayout({PLOT}, {{'xaxis.autorange': true}})")
    page.locator("#spectrum-plot .annotation[data-index]").filter(has_text="▸1").first.click()
    page.wait_for_function(
        f"([lo, hi]) => {{ const r = {PLOT}._fullLayout.xaxis.range;"
        " return Math.abs(r[0] - lo) < 1e-6 && Math.abs(r[1] - hi) < 1e-6; }",
        arg=[lo, hi],
    )
    pages.assert_clean()


def test_it_overlays_a_real_template_of_the_task(pages: BrowserPages) -> None:
    from annotation.spectra.selectors import task_template

    if task_template("A") is None:
        pytest.skip("the real-data cache is not built (make real-data)")
    row = _spectrum()
    page = pages.open("cannon", UserFactory(username="cannon", roles=["expert"]))
    page.goto(f"/spectra/{row.pk}/?task=A")
    expect(page.locator("#spectrum-plot[data-viewer-ready]")).to_be_attached()
    control = page.locator("[data-viewer=template-control]")
    expect(control).to_be_visible()
    expect(control).to_contain_text("V)")  # a real A dwarf
    expect(page.locator("[data-viewer=template-note]")).to_be_hidden()
    traces = page.evaluate(f"{PLOT}.data.length")
    page.locator("[data-viewer=template]").check()
    page.wait_for_function(f"{PLOT}.dataset.template === 'shown'")
    assert page.evaluate(f"{PLOT}.data.length") == traces + 1
    # scaled to the spectrum: the template's median lies within a factor 3 of the data's
    ratio = page.evaluate(
        f"(() => {{ const n = {PLOT}; const med = a => {{ const k = a.filter(v => v !== null)"
        ".sort((x, y) => x - y); return k[Math.floor(k.length / 2)]; };"
        " return med(Array.from(n.data[n.data.length - 1].y)) /"
        " med(Array.from(n.data[n._specvetFluxIndex].y)); })()"
    )
    assert 1 / 3 < ratio < 3
    page.locator("[data-viewer=template]").uncheck()
    page.wait_for_function(f"{PLOT}.dataset.template === 'hidden'")
