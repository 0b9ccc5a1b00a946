"""An expert scores trajectories on the 0-5 rubric, then compares a pair (paper Figure 7)."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from annotation.rating.models import PairJudgement, RatingAssignment
from annotation.spectra import selectors as spectra_selectors
from annotation.spectra.models import Task
from tests.e2e.conftest import BrowserPages
from tests.factories import UserFactory
from tests.web.rating.test_views import make_campaign

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True, serialized_rollback=True)]


def expect_plots_drawn(page: Page, count: int) -> None:
    expect(page.locator("[data-plot-source].js-plotly-plot")).to_have_count(count)


def test_it_scores_on_the_rubric_then_judges_a_pair_with_the_keyboard(
    pages: BrowserPages,
) -> None:
    alice = UserFactory(username="alice", roles=["rater"])
    # Two models' trajectories on one spectrum: two items to score and one pair to judge.
    campaign = make_campaign(Task.objects.get(code="CV"), [alice], alice, n=2, paired=True)
    page = pages.open("alice", alice)
    page.goto(f"/rating/{campaign.pk}/rate/")
    expect(page.locator("#rate-progress")).to_contain_text("Scored 0 / 2")
    expect_plots_drawn(page, 1)
    first = page.locator(".blind-id").inner_text()

    rubric = page.locator("#rubric-panel")
    expect(rubric).to_be_hidden()
    page.keyboard.press("?")
    expect(rubric).to_be_visible()
    expect(rubric.locator("tbody tr")).to_have_count(6)
    page.keyboard.press("?")
    expect(rubric).to_be_hidden()

    page.keyboard.press("4")  # scores and swaps in the next trajectory (htmx)
    expect(page.locator("#rate-progress")).to_contain_text("Scored 1 / 2")
    expect(page.locator(".blind-id")).not_to_have_text(first)
    expect_plots_drawn(page, 1)  # rating.js draws the swapped-in plot
    page.get_by_role("button", name="2", exact=True).click()
    expect(page.locator("#rate-panel")).to_contain_text("All 2 trajectories scored.")
    pages.assert_clean()
    scores = {a.item.blind_id: a.score for a in RatingAssignment.objects.filter(rater=alice)}
    assert scores[first] == 4 and sorted(scores.values()) == [2, 4]

    # The pairwise comparison: both explanations side by side; the right arrow says "right".
    page.get_by_role("link", name="Compare pairs (0 / 1)").click()
    expect(page.locator("#pair-progress")).to_contain_text("Judged 0 / 1")
    expect_plots_drawn(page, 2)
    page.keyboard.press("ArrowRight")
    expect(page.locator("#pair-panel")).to_contain_text("All 1 pairs judged.")
    pages.assert_clean()
    assert PairJudgement.objects.get(rater=alice).outcome == "right"


def test_it_zooms_a_rating_plot_to_the_windows_full_resolution(pages: BrowserPages) -> None:
    """Issue 37 (b): the rating plot is thinned; zoomed in, it fetches the window's own pixels
    (by the item's blind id) as the spectrum viewer does."""
    alice = UserFactory(username="alice", roles=["rater"])
    campaign = make_campaign(Task.objects.get(code="CV"), [alice], alice, n=1)
    page = pages.open("alice", alice)
    page.goto(f"/rating/{campaign.pk}/rate/")
    expect_plots_drawn(page, 1)
    plot = "document.querySelector('[data-plot-source].js-plotly-plot')"
    flux = f"{plot}.data.find(d => d.name === 'flux')"
    whole = page.evaluate(f"{flux}.x.length")
    with page.expect_response(lambda r: f"/api/rating/campaigns/{campaign.pk}/items/" in r.url):
        page.evaluate(
            f"Plotly.relayout({plot}, {{'xaxis.range[0]': 6500, 'xaxis.range[1]': 6600}})"
        )
    page.wait_for_function(f"{flux}.x.length !== {whole}")
    shown = page.evaluate(f"{flux}.x.filter(x => x >= 6500 && x <= 6600).length")
    assert shown > 20
    item = campaign.items.get()
    assert item.spectrum is not None
    wave = spectra_selectors.spectrum_plot_arrays(item.spectrum)[0]
    assert shown == int(((wave >= 6500) & (wave <= 6600)).sum())  # every pixel of the window
    pages.assert_clean()
