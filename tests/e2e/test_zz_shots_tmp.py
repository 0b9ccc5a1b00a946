from __future__ import annotations
import os
import pytest
from playwright.sync_api import expect
from tests.e2e.conftest import BrowserPages
from tests.e2e.test_workbench_bugs_e2e import _load_g7, _zoom_x
from tests.factories import UserFactory

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True, serialized_rollback=True)]
TAG = os.environ.get("SHOT_TAG", "x")

def test_shots(pages: BrowserPages) -> None:
    row = _load_g7()
    page = pages.open("cannon", UserFactory(username="cannon", roles=["expert"]))
    page.set_viewport_size({"width": 1280, "height": 900})
    page.goto(f"/spectra/{row.pk}/?task=CV")
    expect(page.locator("#spectrum-plot.js-plotly-plot")).to_be_attached()
    page.wait_for_timeout(500)
    page.locator("#spectrum-plot").screenshot(path=f"/tmp/shots/{TAG}-plot.png")
    _zoom_x(page, 6500.0, 6620.0)
    page.wait_for_timeout(800)
    page.locator("#spectrum-plot").screenshot(path=f"/tmp/shots/{TAG}-zoom.png")

def test_shots_bt(pages: BrowserPages) -> None:
    from tests.e2e.test_workbench_bugs_e2e import _pairwise_campaign
    staff = UserFactory(username="cannon", roles=["staff"])
    rater = UserFactory(username="payne", roles=["rater"])
    campaign = _pairwise_campaign(staff, rater, ["a", "a", "tie", "b", "a"])
    page = pages.open("cannon", staff)
    page.set_viewport_size({"width": 1280, "height": 900})
    page.goto(f"/rating/{campaign.pk}/analysis/")
    expect(page.locator("#strengths-plot .ytick text").first).to_be_attached()
    page.locator("#strengths-plot").screenshot(path=f"/tmp/shots/{TAG}-bt.png")
