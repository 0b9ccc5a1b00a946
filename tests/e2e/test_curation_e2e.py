"""Three experts take a draft through the whole curation loop in the browser (paper section 3.2)."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from annotation.curation.models import Curation, CurationState
from tests.e2e.conftest import BrowserPages
from tests.factories import PASSWORD, UserFactory, make_curation

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True, serialized_rollback=True)]


def log_in(page: Page, username: str) -> None:
    """Through the real login page."""
    page.goto("/curation/")
    expect(page).to_have_url(re.compile(r"/accounts/login/"))
    page.get_by_label("User name").fill(username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(page.locator(".topbar .user")).to_contain_text(username)
    expect(page).to_have_url(re.compile(r"/curation/$"))


def expect_state(page: Page, label: str) -> None:
    expect(page.locator(".page-head .badge.state")).to_have_text(label)


def expect_plot_drawn(page: Page, selector: str = "#spectrum-plot") -> None:
    """Plotly drew the spectrum's trace (SVG, not WebGL since issue 37 item 10): the page's own
    scripts ran."""
    expect(page.locator(f"{selector}.js-plotly-plot .main-svg").first).to_be_attached()
    expect(page.locator(f"{selector} .scatterlayer .trace").first).to_be_attached()


def audit_and_approve(page: Page, curation: Curation) -> None:
    page.goto(f"/curation/{curation.pk}/audit/")
    expect(page.get_by_role("button", name="Claim an audit")).to_be_visible()
    page.keyboard.press("c")
    expect(page.get_by_role("button", name=re.compile(r"^Approve v2"))).to_be_visible()
    expect(page.locator("#diff-step-1 .badge")).to_have_text("changed")
    page.keyboard.press("a")
    expect(page).to_have_url(re.compile(rf"/curation/{curation.pk}/$"))
    expect(page.locator(".messages")).to_contain_text("Your verdict is recorded.")


def vote_accept(page: Page, curation: Curation) -> None:
    page.goto(f"/curation/{curation.pk}/vote/")
    expect(page.get_by_role("button", name="Accept")).to_be_visible()
    page.keyboard.press("y")
    expect(page.get_by_role("button", name="Accept")).to_have_count(0)
    expect(
        page.locator(".votes, main p").filter(has_text=re.compile("You voted|accept"))
    ).not_to_have_count(0)


def test_it_takes_a_draft_from_screening_to_accepted_with_three_experts(
    pages: BrowserPages,
) -> None:
    payne, leavitt, cannon = (
        UserFactory(username=n, roles=["expert"]) for n in ("payne", "leavitt", "cannon")
    )
    curation = make_curation()

    # Payne logs in through the login page and screens the draft (key K keeps it).
    screener = pages.open("payne")
    log_in(screener, "payne")
    screener.goto(f"/curation/{curation.pk}/screen/")
    expect_plot_drawn(screener)
    screener.keyboard.press("k")
    expect(screener.locator(".messages")).to_contain_text(f"Trajectory {curation.pk} kept.")
    pages.assert_clean()

    # Leavitt claims the revision (key C), moves the window, sees the tool's new view, saves (S)
    # and submits the version for audit (U).
    reviser = pages.open("leavitt", leavitt)
    reviser.goto(f"/curation/{curation.pk}/")
    expect_state(reviser, "in revision")
    reviser.keyboard.press("c")
    expect(reviser).to_have_url(re.compile(rf"/curation/{curation.pk}/revise/$"))
    # The editor's scripts (htmx among them) have run once the page's spectrum is drawn: typing
    # before that would change a range that nothing re-renders yet.
    reviser.wait_for_load_state("load")
    expect_plot_drawn(reviser)
    image = reviser.locator("#step-image-0 img")
    old_src = image.get_attribute("src")
    reviser.locator("textarea[name=step-0-think]").fill("Zoom on the H-alpha core and its wings.")
    reviser.locator("input[name=step-0-lo]").fill("6500")
    reviser.locator("input[name=step-0-hi]").fill("6620")
    reviser.locator("input[name=step-0-hi]").press("Tab")  # "change" re-renders the step image
    expect(image).not_to_have_attribute("src", old_src or "")
    expect(image).to_have_attribute("src", re.compile(r"lo=6500&hi=6620"))
    expect(image).to_have_js_property("complete", True)
    reviser.locator("input[name=step-0-label]").blur()
    reviser.keyboard.press("s")
    expect(reviser.locator(".messages")).to_contain_text("Saved version 2.")
    expect(reviser.get_by_role("button", name=re.compile(r"^Submit v2 for audit"))).to_be_enabled()
    reviser.keyboard.press("u")
    expect(reviser).to_have_url(re.compile(rf"/curation/{curation.pk}/$"))
    expect_state(reviser, "in audit")
    pages.assert_clean()

    # Payne and Cannon each claim an audit (C) and approve v2 (A); standardization follows.
    audit_and_approve(screener, curation)
    expect_state(screener, "in audit")
    auditor = pages.open("cannon", cannon)
    audit_and_approve(auditor, curation)
    expect_state(auditor, "in vote")
    auditor.goto(f"/curation/{curation.pk}/standardized/")
    expect(auditor.get_by_role("heading", name="Standardized as v3")).to_be_visible()
    expect(auditor.locator("p.ok")).to_contain_text("Tool actions checked")
    pages.assert_clean()

    # The three vote to accept (Y); the result shows once all three are in.
    for page in (reviser, screener, auditor):
        vote_accept(page, curation)
    expect(auditor.locator(".votes li")).to_have_count(3)
    expect(auditor.get_by_role("heading", name="Result: accepted")).to_be_visible()
    screener.reload()
    expect(screener.get_by_role("heading", name="Result: accepted")).to_be_visible()
    pages.assert_clean()

    curation.refresh_from_db()
    assert curation.state == CurationState.ACCEPTED
    assert (curation.reviser, curation.head_number) == (leavitt, 3)
    assert {curation.auditor_1, curation.auditor_2} == {payne, cannon}
