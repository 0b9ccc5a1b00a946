"""Every page in the menu, and the spectrum page's tool, load without a script error or CSP block."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from annotation.spectra.models import Task
from tests.e2e.conftest import BrowserPages
from tests.factories import UserFactory, make_spectrum

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True, serialized_rollback=True)]


def test_it_opens_every_menu_page_without_a_script_error(pages: BrowserPages) -> None:
    cv = Task.objects.get(code="CV")
    row = make_spectrum(object_id="POS", task=cv, label="YES", seed=1, line_amplitude=3.0)
    page = pages.open(
        "cannon", UserFactory(username="cannon", roles=["staff", "expert", "ml_engineer"])
    )
    page.goto("/")
    menu = page.locator("header nav.nav a")
    expect(menu.first).to_be_visible()
    links = menu.evaluate_all("links => links.map(link => link.getAttribute('href'))")
    assert len(links) >= 8, links
    for href in links:
        response = page.goto(href)
        assert response is not None and response.status == 200, href
        expect(page.locator("main")).not_to_be_empty()
    pages.assert_clean()

    # The spectrum page: the Plotly plot, and a diagnostic window's chip renders the tool's view.
    page.goto(f"/spectra/{row.pk}/")
    expect(page.locator("#spectrum-plot.js-plotly-plot")).to_be_attached()
    page.locator(".chip").first.click()
    expect(page.locator("#render-result img.tool-png")).to_have_js_property("complete", True)
    expect(page.locator("#render-result [data-shown-range]")).to_contain_text("Showing")
    pages.assert_clean()
