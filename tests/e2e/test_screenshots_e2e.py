"""The screenshots of the docs, taken of today's pages: the demo data, the main pages as the
demo users see them, each saved into docs/_static/screenshots/ (not committed; `make docs` runs
this first, and the docs build puts placeholders in place of missing ones)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from django.core.management import call_command
from PIL import Image
from playwright.sync_api import Page, expect

from annotation.curation.models import Curation
from annotation.inspections.models import InspectionRun
from annotation.rating.models import RatingCampaign
from annotation.spectra.models import Spectrum
from tests.e2e.conftest import BrowserPages

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

SCREENSHOTS = Path(__file__).resolve().parents[2] / "docs" / "_static" / "screenshots"
VIEWPORT = {"width": 1280, "height": 800}


def shoot(page: Page, path: str, name: str) -> Path:
    page.set_viewport_size(VIEWPORT)
    response = page.goto(path)
    assert response is not None and response.status == 200, path
    expect(page.locator("main")).not_to_be_empty()
    page.wait_for_load_state("networkidle")
    target = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=target)
    return target


def test_it_saves_a_screenshot_of_each_main_page_for_the_docs(pages: BrowserPages) -> None:
    from django.contrib.auth import get_user_model

    call_command("demo_setup", scale=0.1, stdout=open("/dev/null", "w"))  # noqa: SIM115
    users = get_user_model().objects
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    cannon = pages.open("cannon", users.get(username="cannon"))
    payne = pages.open("payne", users.get(username="payne"))
    leavitt = pages.open("leavitt", users.get(username="leavitt"))
    run = InspectionRun.objects.order_by("pk").first()
    curation = Curation.objects.order_by("pk").first()
    campaign = RatingCampaign.objects.order_by("pk").first()
    # A real LAMOST spectrum (demo_setup loads the two shipped in agent/data/lamost).
    spectra = Spectrum.objects.order_by("pk")
    spectrum = spectra.filter(survey="LAMOST").first() or spectra.first()
    assert run and curation and campaign and spectrum, (
        "demo_setup made no run, curation or campaign"
    )

    saved = [shoot(cannon, "/", "home")]
    saved.append(shoot(cannon, f"/spectra/{spectrum.pk}/?task=CV", "spectrum"))
    expect(cannon.locator("#spectrum-plot.js-plotly-plot")).to_be_attached()
    cannon.locator(".chip").first.click()
    expect(cannon.locator("#render-result img.tool-png")).to_have_js_property("complete", True)
    cannon.screenshot(path=saved[-1])
    saved.append(shoot(cannon, f"/curation/{curation.pk}/", "curation"))
    saved.append(shoot(leavitt, f"/rating/{campaign.pk}/rate/", "rating"))
    saved.append(shoot(payne, f"/rating/{campaign.pk}/pairs/", "rating-pairs"))
    saved.append(shoot(cannon, f"/inspections/{run.pk}/", "inspection"))
    saved.append(shoot(cannon, "/catalog/", "catalog"))
    saved.append(shoot(cannon, "/vetting/", "vetting"))
    saved.append(shoot(cannon, "/training/", "training"))
    saved.append(shoot(cannon, "/accounts/roles/", "roles"))
    pages.assert_clean()

    for path in saved:
        with Image.open(path) as image:
            assert image.size == (VIEWPORT["width"], VIEWPORT["height"]), path
            shades = np.unique(np.asarray(image.convert("L").resize((64, 40))))
            assert shades.size > 8, f"{path} is blank"
