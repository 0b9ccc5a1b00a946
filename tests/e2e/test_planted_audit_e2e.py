"""A planted audit round in the browser: staff plant, an auditor audits through the normal
page (nothing says it is planted), staff read the catch rate."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse
from playwright.sync_api import expect

from annotation.curation.models import Curation
from tests.e2e.conftest import BrowserPages
from tests.factories import UserFactory, make_revised_curation

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True, serialized_rollback=True)]


def test_it_plants_an_error_an_auditor_catches_and_staff_read_the_catch_rate(
    pages: BrowserPages,
) -> None:
    reviser = UserFactory(username="leavitt", roles=["expert"])
    approvers = [UserFactory(username=n, roles=["expert"]) for n in ("cannon", "payne")]
    ada = UserFactory(username="ada", roles=["expert"])
    staff = UserFactory(username="stella", roles=["staff"])
    make_revised_curation(reviser=reviser, auditors=approvers)
    planted_page = reverse("curation_planted")  # loads the URLs here, not in the first request

    # Staff plant one flipped answer and assign it to Ada.
    boss = pages.open("stella", staff)
    boss.goto(planted_page)
    for kind in ("wrong_window", "misread_line", "contradicting_step"):
        boss.locator(f"input[name=kinds][value={kind}]").uncheck()
    boss.locator("input[name=count]").fill("1")
    boss.locator("select[name=auditors]").select_option(["ada"])
    boss.get_by_role("button", name="Plant").click()
    expect(boss.locator(".messages")).to_contain_text("Planted 1 errors")
    copy = Curation.objects.get(planted=True)
    pages.assert_clean()

    # Ada finds it among her audits and audits it on the usual page: nothing says "planted".
    auditor = pages.open("ada", ada)
    auditor.goto("/curation/")
    expect(auditor.locator(f'main a[href^="/curation/{copy.pk}/"]').first).to_be_visible()
    auditor.goto(f"/curation/{copy.pk}/audit/")
    expect(auditor.locator("#audit-form")).to_be_visible()
    expect(auditor.locator("main")).not_to_contain_text(re.compile("planted", re.IGNORECASE))
    auditor.locator("textarea[name=step-1-comment]").fill("The answer contradicts the lines.")
    auditor.locator("textarea[name=comment]").fill("The final answer is flipped.")
    auditor.get_by_role("button", name=re.compile("Request changes")).click()
    expect(auditor).to_have_url(re.compile(rf"/curation/{copy.pk}/$"))
    expect(auditor.locator(".messages")).to_contain_text("Your verdict is recorded.")
    pages.assert_clean()

    # Staff see Ada's catch, located on the answer, with its Wilson interval.
    boss.goto(planted_page)
    row = boss.locator('#catch-rates tr[data-group="auditor"][data-key="ada"]')
    expect(row).to_contain_text("100 %")
    expect(row).to_contain_text("0.21")  # Wilson 95 % lower bound of 1 of 1
    boss.goto(reverse("curation_analysis"))
    expect(boss.locator('#catch-rates tr[data-key="flipped_answer"]')).to_contain_text("100 %")
    pages.assert_clean()
