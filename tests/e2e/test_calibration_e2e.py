"""The vetting loop's pages in a browser: calibration and triage (the reliability diagram drawn,
a target purity set, an audit sample drawn) and gold items (one marked), with no script error."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import expect

from annotation.inspections import services as inspection_services
from annotation.learning import services
from tests.e2e.conftest import BrowserPages
from tests.factories import UserFactory, make_inspected, make_spectrum

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

SCREENSHOTS = Path(__file__).resolve().parents[2] / "var" / "screenshots"
# How many lines an element's text takes: its line boxes, told apart by their top edge.
TEXT_LINES = """element => {
  const range = document.createRange();
  range.selectNodeContents(element);
  return new Set([...range.getClientRects()].map(rect => Math.round(rect.top))).size;
}"""


def test_it_draws_the_calibration_and_manages_triage_and_gold(pages: BrowserPages) -> None:
    staff = UserFactory(username="cal-staff", roles=["staff", "ml_engineer"])
    experts = [UserFactory(username=f"cal-expert-{i}", roles=["expert"]) for i in range(2)]
    spectra = [make_spectrum(object_id=f"CAL-{i:02d}", seed=300 + i) for i in range(12)]
    run = make_inspected(
        spectra=spectra,
        verdicts={row.pk: ("YES", 0.9 if i % 3 else 0.7) for i, row in enumerate(spectra)},
        created_by=staff,
        threshold=0.5,
        model=("checkpoint:e2e", "checkpoint e2e"),
    )
    for i, row in enumerate(spectra[:8]):
        candidate = run.candidates.get(spectrum=row)
        for expert in experts:
            inspection_services.expert_decision_record(
                candidate=candidate, expert=expert, decision="YES" if i % 2 else "NO"
            )
    services.recalibrate_task(task=run.task, model_key="checkpoint:e2e", actor=staff, job=None)

    page = pages.open("staff", staff)
    page.goto("/catalog/calibration/?task=CV")
    expect(page.locator("#reliability-plot.js-plotly-plot")).to_be_attached()
    expect(page.locator("#reliability-plot .scatterlayer .trace")).to_have_count(3)
    page.fill("input[name=target_percent]", "90")
    page.click("#triage-target button[type=submit]")
    expect(page.locator("#target-purity")).to_have_text("90 %")
    page.click("#audits button[type=submit]")
    expect(page.locator(".audit-sample")).to_have_count(1)
    expect(page.locator(".audit-purity")).not_to_be_empty()
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "calibration.png"), full_page=True)
    refit = page.locator("tr.calibration-model button", has_text="Refit").first
    assert refit.evaluate(TEXT_LINES) == 1  # the label does not wrap in its narrow column
    page.goto("/vetting/gold/")
    page.locator("#gold-eligible button[type=submit]").first.click()
    expect(page.locator("#gold-items tbody tr")).to_have_count(1)
    pages.assert_clean()
