""" "Find more like this" in the browser (issue 35 part 3): from a spectrum's page, the
neighbours nearest first, then "queue these for vetting" puts their finished candidates back
in the experts' queue."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from annotation.inspections.models import Candidate
from annotation.spectra import neighbour_index
from tests.e2e.conftest import BrowserPages
from tests.factories import UserFactory, make_inspected, make_spectrum

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

HALPHA = 6564.61


@pytest.fixture
def similar_world():
    neighbour_index.reset()
    query = make_spectrum(object_id="E2E-QUERY", line_center=HALPHA, seed=1)
    near = [
        make_spectrum(object_id=f"E2E-NEAR-{k}", line_center=HALPHA + 6.0 * (k + 1), seed=k + 2)
        for k in range(3)
    ]
    far = make_spectrum(object_id="E2E-FAR", line_center=4862.68, seed=9)
    run = make_inspected(spectra=near, verdicts={row.pk: ("YES", 0.99) for row in near})
    Candidate.objects.filter(run=run).update(needs_expert=False)
    yield {"query": query, "near": near, "far": far, "run": run}
    neighbour_index.reset()


def test_it_finds_more_like_this_and_queues_them(pages: BrowserPages, similar_world) -> None:
    user = UserFactory(username="fleming", roles=["staff", "expert"])
    page = pages.open("fleming", user)
    # the spectrum page's plot scripts are large: the link is there before they load
    page.goto(f"/spectra/{similar_world['query'].pk}/", wait_until="commit")
    link = page.locator("#find-similar")
    expect(link).to_be_visible()
    link.click()
    rows = page.locator("table.similar-neighbours tbody tr")
    expect(rows).to_have_count(4)
    for position, spectrum in enumerate(similar_world["near"]):
        expect(rows.nth(position)).to_contain_text(spectrum.object_id)
    expect(rows.nth(3)).to_contain_text("E2E-FAR")
    pages.assert_clean()

    page.locator("#similar-filters select[name=vetted]").select_option("no")
    page.locator("#similar-filters input[name=k]").fill("3")
    page.locator("#similar-filters button").click()
    expect(rows).to_have_count(3)
    page.locator("#similar-queue select[name=task]").select_option("CV")
    page.locator("#queue-similar").click()
    expect(page.locator(".messages")).to_contain_text("3 candidates queued for CV")
    assert set(
        Candidate.objects.filter(run=similar_world["run"], needs_expert=True).values_list(
            "spectrum_id", flat=True
        )
    ) == {row.pk for row in similar_world["near"]}
    pages.assert_clean()
