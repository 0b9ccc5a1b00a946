"""Evidence ablation in a browser: staff ablate a sample of a run from its page, the candidate
page says what the answer depends on, the catalog filters on it and the calibration page counts
how many confident answers survive; no script error on the way."""

from __future__ import annotations

import numpy as np
import pytest
from playwright.sync_api import expect

from agent.synthetic import generate_sample
from annotation.inspections import jobs
from annotation.inspections import services as inspection_services
from annotation.spectra import services as spectra_services
from annotation.spectra.models import Task
from tests.e2e.conftest import BrowserPages
from tests.factories import UserFactory

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True, serialized_rollback=True)]


def _stored(object_id: str, subtype: str, *, label: bool) -> int:
    rng = np.random.default_rng(1)
    value = generate_sample("CV", label, rng=rng, subtype=subtype, snr=40.0).spectrum
    value.object_id = object_id
    stored = spectra_services.spectra_store(
        values=[value], dataset="e2e-ablation", source_name=f"{object_id}.fits"
    )
    return stored.created[0].pk


def test_it_ablates_a_run_s_evidence_and_shows_what_the_answers_rest_on(
    pages: BrowserPages,
) -> None:
    staff = UserFactory(username="abl-staff", roles=["staff", "ml_engineer"])
    ids = [
        _stored("ABL-NOVA", "cv_dwarf_nova", label=True),
        _stored("ABL-DME", "dme", label=False),
    ]
    run = inspection_services.inspection_run_create(
        task=Task.objects.get(code="CV"),
        spectrum_ids=ids,
        policy_spec={"kind": "rule-based"},
        created_by=staff,
        enqueue=False,
    )
    claimed = inspection_services.candidates_claim(
        candidate_ids=list(run.candidates.values_list("pk", flat=True))
    )
    jobs.run_candidates(claimed)
    nova = run.candidates.get(spectrum__object_id="ABL-NOVA")

    page = pages.open("staff", staff)
    page.goto(f"/inspections/{run.pk}/", wait_until="domcontentloaded")
    form = page.locator("#evidence-ablation-form")
    form.locator("input[name=size]").fill("2")
    form.locator("input[name=seed]").fill("3")
    form.locator("button[type=submit]").click()
    expect(page.locator("#evidence-ablation")).to_contain_text("re-run with the windows")
    expect(page.locator("#evidence-ablation")).to_contain_text("flipped")

    page.goto(f"/inspections/candidates/{nova.pk}/", wait_until="domcontentloaded")
    sentence = page.locator("#evidence-ablation .ablation-sentence")
    expect(sentence).to_contain_text("The answer depends on")
    expect(sentence).to_contain_text("flips YES to NO")

    page.goto(f"/catalog/?run={run.pk}&evidence=flips", wait_until="domcontentloaded")
    expect(page.locator("table.catalog-table tbody tr")).to_have_count(1)
    expect(page.locator("table.catalog-table tbody tr").first).to_contain_text("ABL-NOVA")
    expect(page.locator("select[name=evidence]")).to_have_value("flips")

    page.goto("/catalog/calibration/?task=CV", wait_until="domcontentloaded")
    expect(page.locator("#evidence-survival table tbody tr")).to_have_count(1)
    expect(page.locator("#evidence-survival .survival")).not_to_be_empty()
    pages.assert_clean()
