"""The loop's pages in the browser (issue 25): labels with provenance in the catalog, the three
kinds of training data on the exports page, the comparison of two models with the vetted labels
as truth, and a promotion."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from annotation.catalog import comparisons
from annotation.curation.models import DatasetExport, ExportKind
from annotation.inspections import services
from annotation.inspections.models import CatalogEntry, ModelPromotion
from annotation.spectra.models import LabelExport
from tests.e2e.conftest import BrowserPages
from tests.factories import UserFactory, make_inspected, make_revised_curation, make_spectrum
from tests.web.rating.test_preferences import judged_campaign

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

OLD = ("rule-based@old", "rule-based old")
NEW = ("checkpoint:" + "ab" * 32, "checkpoint dpo-run · abababababab")
# Per spectrum: the vetted truth, the old verdict and the new one (fixed, broken, kept, kept).
CASES = [("YES", "NO", "YES"), ("NO", "NO", "YES"), ("YES", "YES", "YES"), ("NO", "NO", "NO")]


@pytest.fixture
def loop_world(training_dirs):
    experts = [
        UserFactory(username=name, roles=["expert"]) for name in ("payne", "leavitt", "cannon2")
    ]
    spectra = [make_spectrum(object_id=f"E2E-{i}", seed=i) for i in range(len(CASES))]
    old = make_inspected(
        spectra=spectra,
        verdicts={row.pk: (case[1], 0.9) for row, case in zip(spectra, CASES, strict=True)},
        model=OLD,
    )
    new = make_inspected(
        spectra=spectra,
        verdicts={row.pk: (case[2], 0.9) for row, case in zip(spectra, CASES, strict=True)},
        model=NEW,
    )
    for row, case in zip(spectra, CASES, strict=True):
        candidate = old.candidates.get(spectrum=row)
        services.expert_decision_record(candidate=candidate, expert=experts[0], decision=case[0])
        # The second expert disagrees on the last spectrum: a conflict for a third expert.
        other = ("YES" if case[0] == "NO" else "NO") if row == spectra[-1] else case[0]
        services.expert_decision_record(candidate=candidate, expert=experts[1], decision=other)
    make_revised_curation(reviser=experts[2], auditors=experts[:2], object_id="E2E-REV", seed=9)
    raters = [UserFactory(username="alice", roles=["rater"])]
    pair_spectra = [make_spectrum(object_id="E2E-PAIR", seed=20)]
    judged_campaign(raters, experts[0], pair_spectra, [("left",)], close=True)
    return {"old": old, "new": new, "spectra": spectra}


@pytest.fixture
def training_dirs(settings, tmp_path):
    settings.TRAINING_OUTPUT_ROOT = tmp_path / "training"
    settings.MEDIA_ROOT = tmp_path / "media"


def test_it_walks_the_loop_pages(pages: BrowserPages, loop_world) -> None:
    user = UserFactory(username="cannon", roles=["staff", "expert", "ml_engineer"])
    page = pages.open("cannon", user)

    # Labels: the conflict is listed; an agreed label shows the decisions behind it.
    page.goto("/catalog/?label_state=conflict")
    rows = page.locator("table.catalog-table tbody tr")
    conflicted = CatalogEntry.objects.filter(label_state="conflict")
    assert set(conflicted.values_list("object_id", flat=True)) == {"E2E-3"}
    expect(rows).to_have_count(conflicted.count())
    expect(rows.first).to_contain_text("E2E-3")
    expect(page.locator(".badge.label-conflict").first).to_be_visible()
    entry = CatalogEntry.objects.get(run=loop_world["old"], spectrum=loop_world["spectra"][0])
    page.goto(f"/catalog/{entry.pk}/")
    provenance = page.locator("section.vetted-label")
    expect(provenance).to_contain_text("two experts agree")
    expect(provenance.locator("table.label-provenance tbody tr")).to_have_count(2)
    expect(provenance).to_contain_text("rule-based old")
    pages.assert_clean()

    # Training data: one export of each kind, each listed with its download.
    page.goto("/labels/exports/")
    page.locator("#label-export-form button").click()
    expect(page.locator("#label-exports tbody tr").first).to_contain_text("v1")
    page.locator("#revised-export-form button").click()
    expect(page.locator("#revised-export-table tbody tr").first).to_contain_text("v1")
    page.locator("#preference-export-form button").click()
    preference_row = page.locator("#preference-export-table tbody tr").first
    expect(preference_row).to_contain_text("draft_revision: 1")
    expect(preference_row).to_contain_text("pair_judgement: 1")
    assert LabelExport.objects.get().manifest["rows"] == 3  # the conflict makes no label
    preference = DatasetExport.objects.get(kind=ExportKind.PREFERENCE)
    link = preference_row.locator("a[download]")
    expect(link).to_have_attribute("href", f"/datasets/{preference.pk}/download/")
    with page.expect_download() as download:
        link.click()
    assert download.value.suggested_filename == "specvet-preference-v1.zip"
    pages.assert_clean()

    # The comparison, vetted labels as truth: one fixed, one broken (the conflict has no label).
    page.goto(f"/catalog/compare/?task=CV&new={NEW[0]}&old={OLD[0]}")
    expected = comparisons.compare_models(
        entries=CatalogEntry.objects.all(), task="CV", old_key=OLD[0], new_key=NEW[0]
    )
    assert (expected.fixed, expected.broken, expected.labelled) == (1, 1, 3)
    expect(page.locator("#count-shared")).to_have_text("4")
    expect(page.locator("#count-fixed")).to_have_text("1")
    expect(page.locator("#count-broken")).to_have_text("1")
    expect(page.locator("#comparison-table tbody tr")).to_have_count(expected.flipped)
    pages.assert_clean()

    # Promotion: the new model becomes current for CV, and the page says so.
    page.locator("#promote-form select[name=model_key]").select_option(NEW[0])
    page.locator("#promote-form input[name=comment]").fill("fixes E2E-0")
    page.locator("#promote-form button").click()
    expect(page.locator("body")).to_contain_text(re.compile(r"is now the current model for CV"))
    assert ModelPromotion.objects.get().model_key == NEW[0]
    expect(page.locator("#promote-form")).to_contain_text(NEW[1])
    pages.assert_clean()
