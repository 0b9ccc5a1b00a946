"""Pages and APIs of the vetting loop: who may read and act, what they show."""

from __future__ import annotations

import json
import re
from html import unescape

import pytest
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from annotation.core.charts import plotly_text
from annotation.core.models import Job
from annotation.inspections import services as inspection_services
from annotation.inspections.models import CatalogEntry
from annotation.learning import services
from annotation.learning.models import AuditSample, GoldItem, TriageTarget
from tests.factories import make_inspected, make_spectrum

pytestmark = pytest.mark.django_db

LINK = '<a href="javascript:alert(1)">x</a>'
MODEL = ("checkpoint:v", f"checkpoint {LINK}")


@pytest.fixture
def fitted(owner, expert, outsider, staff):
    spectra = [make_spectrum(object_id=f"V-{i}", seed=200 + i) for i in range(6)]
    run = make_inspected(
        spectra=spectra,
        verdicts={row.pk: ("YES", 0.9) for row in spectra},
        created_by=owner,
        threshold=0.5,
        model=MODEL,
    )
    for i, row in enumerate(spectra[:4]):
        candidate = run.candidates.get(spectrum=row)
        for user in (expert, outsider):
            inspection_services.expert_decision_record(
                candidate=candidate, expert=user, decision="YES" if i % 2 else "NO"
            )
    services.recalibrate_task(task=run.task, model_key=MODEL[0], actor=staff, job=None)
    return run


def client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def api_for(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def test_it_shows_the_calibration_with_an_escaped_reliability_diagram(fitted, viewer):
    body = client_for(viewer).get(f"{reverse('calibration')}?task=CV").content.decode()
    assert "v1 · slope" in body
    found = re.search(r'<script id="reliability-data" type="application/json">(.*?)</script>', body)
    chart = json.loads(unescape(found.group(1)))
    assert chart[0]["name"] == plotly_text(MODEL[1])
    assert "<a href" not in json.dumps(chart)
    assert LINK not in body  # the table escapes it too
    assert "Refit" not in body and "Draw an audit sample" not in body  # viewers only read


def test_it_shows_the_recalibrated_confidence_beside_the_raw_one(fitted, viewer):
    entry = CatalogEntry.objects.filter(run=fitted).first()
    body = client_for(viewer).get(reverse("catalog_detail", args=[entry.pk])).content.decode()
    assert "recalibrated 0." in body and "0.900" in body


def test_it_lets_ml_engineers_refit_and_refuses_experts(
    fitted, ml_engineer, expert, django_capture_on_commit_callbacks
):
    assert client_for(expert).post(reverse("calibration_refit"), {"task": "CV"}).status_code == 403
    with django_capture_on_commit_callbacks(execute=True):
        response = client_for(ml_engineer).post(
            reverse("calibration_refit"), {"task": "CV", "model_key": MODEL[0]}
        )
    assert response.status_code == 302
    job = Job.objects.get(kind="recalibration")
    assert job.state == "succeeded" and job.result["models"][MODEL[0]]["version"] == 2


def test_it_lets_staff_set_a_target_purity(fitted, staff, ml_engineer):
    assert (
        client_for(ml_engineer)
        .post(reverse("triage_target"), {"task": "CV", "target_percent": "99"})
        .status_code
        == 403
    )
    client = client_for(staff)
    bad = client.post(
        reverse("triage_target"), {"task": "CV", "target_percent": "abc"}, follow=True
    )
    assert "number of per cent" in bad.content.decode()
    client.post(reverse("triage_target"), {"task": "CV", "target_percent": "99.5"})
    assert TriageTarget.objects.get().target_purity == pytest.approx(0.995)


def test_it_lets_staff_draw_and_close_an_audit_sample(fitted, staff, expert):
    data = {"task": "CV", "model_key": MODEL[0], "per_stratum": "3"}
    assert client_for(expert).post(reverse("audit_draw"), data).status_code == 403
    client = client_for(staff)
    hidden = client.post(reverse("audit_draw"), {**data, "model_key": "nope"}, follow=True)
    assert "no model you may read" in hidden.content.decode()
    client.post(reverse("audit_draw"), data)
    sample = AuditSample.objects.get()
    body = client.get(f"{reverse('calibration')}?task=CV").content.decode()
    assert f'id="audit-{sample.pk}"' in body and "Purity" in body
    client.post(reverse("audit_close", args=[sample.pk]))
    assert not AuditSample.objects.get().open


def test_it_lets_only_staff_mark_gold_and_see_accuracy(fitted, staff, expert):
    assert client_for(expert).get(reverse("gold")).status_code == 403
    client = client_for(staff)
    page = client.get(reverse("gold")).content.decode()
    labelled = CatalogEntry.objects.filter(run=fitted, label_state="agreed").first()
    assert f'value="{labelled.pk}"' in page
    client.post(reverse("gold_mark"), {"entry": labelled.pk})
    gold = GoldItem.objects.get()
    assert gold.candidate_id == labelled.candidate_id
    newcomer = type(expert).objects.create(username="newcomer")
    services.gold_answer_record(gold=gold, vetter=newcomer, answer=gold.answer)
    assert "newcomer" in client.get(reverse("gold")).content.decode()
    client.post(reverse("gold_retire", args=[gold.pk]))
    assert not GoldItem.objects.get().active


def test_it_serves_the_calibration_and_gold_through_the_api(
    fitted, viewer, staff, expert, ml_engineer
):
    detail = api_for(viewer).get(reverse("api_calibration_detail", args=["CV"]))
    assert detail.status_code == 200
    model = detail.json()["models"][0]
    assert model["fit"]["n_labels"] == 4 and model["model_key"] == MODEL[0]
    assert api_for(expert).post(reverse("api_calibration_refit"), {"task": "CV"}).status_code == 403
    assert (
        api_for(ml_engineer).post(reverse("api_calibration_refit"), {"task": "CV"}).status_code
        == 202
    )
    target = api_for(staff).post(
        reverse("api_triage_target"), {"task": "CV", "target_purity": 0.95}
    )
    assert target.status_code == 201 and target.json()["target_purity"] == 0.95
    assert (
        api_for(ml_engineer)
        .post(reverse("api_triage_target"), {"task": "CV", "target_purity": 0.95})
        .status_code
        == 403
    )
    audit = api_for(staff).post(
        reverse("api_audit_sample_create"), {"task": "CV", "model_key": MODEL[0], "per_stratum": 2}
    )
    assert audit.status_code == 201 and audit.json()["sampled"] >= 1
    labelled = CatalogEntry.objects.filter(run=fitted, label_state="agreed").first()
    gold = api_for(staff).post(
        reverse("api_gold_item_create"), {"candidate": labelled.candidate_id}
    )
    assert gold.status_code == 201
    unlabelled = CatalogEntry.objects.filter(run=fitted, label_state="").first()
    refused = api_for(staff).post(
        reverse("api_gold_item_create"), {"candidate": unlabelled.candidate_id}
    )
    assert refused.status_code == 409
    assert api_for(expert).get(reverse("api_gold_accuracy")).status_code == 403
    assert api_for(staff).get(reverse("api_gold_accuracy")).json() == []
