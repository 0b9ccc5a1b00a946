"""The shift sentinel in the app (annotation.inspections.shifts): a run compared with its model's
calibration set before its confident answers are accepted; flagged on the run page, the run API
and the catalog; released by a recalibration on vetted labels."""

from __future__ import annotations

import numpy as np
import pytest
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from agent.spectra.value import Spectrum as SpectrumValue
from annotation.core.models import Job
from annotation.inspections import shifts
from annotation.inspections.models import (
    Candidate,
    CatalogEntry,
    ShiftCheck,
    ShiftState,
    TriageReason,
)
from annotation.learning import services as learning_services
from annotation.learning.models import CalibrationFit
from annotation.spectra import services as spectra_services
from annotation.spectra.models import Task
from tests.factories import make_inspected

pytestmark = pytest.mark.django_db

HELD = (TriageReason.SHIFT_PENDING, TriageReason.DISTRIBUTION_SHIFT)


@pytest.fixture(autouse=True)
def _no_library(monkeypatch):
    # the real-corpus library is optional (the cache); these tests compare the other features
    monkeypatch.setattr(shifts, "shift_library", lambda: (None, "not computed (test)"))


def stored(n: int, *, noise: float, survey: str = "TEST", seed: int = 0, lo: float = 3700.0):
    rng = np.random.default_rng(seed)
    wave = np.logspace(np.log10(lo), np.log10(9100.0), 3000)
    values = []
    for i in range(n):
        flux = 1.0 + 2.0 * np.exp(-0.5 * ((wave - 6564.61) / 8.0) ** 2)
        flux = flux + rng.normal(0.0, noise, wave.size)
        values.append(
            SpectrumValue(
                wavelength=wave,
                flux=flux,
                ivar=np.full(wave.size, noise**-2),
                survey=survey,
                object_id=f"{survey}-{seed}-{i}",
            )
        )
    return spectra_services.spectra_store(
        values=values, dataset=f"shift-{seed}", source_name=f"{survey}-{seed}.fits"
    ).created


def confident(spectra, owner, **kwargs):
    return make_inspected(
        spectra=spectra, verdicts={row.pk: ("YES", 0.95) for row in spectra}, created_by=owner
    )


@pytest.fixture
def calibrated(owner):
    """30 clean spectra the rule-based inspector's recalibration on CV was fit on."""
    spectra = stored(30, noise=0.02, seed=1)
    reference_run = confident(spectra, owner)
    CalibrationFit.objects.create(
        task=Task.objects.get(code="CV"),
        model_key=reference_run.model_key,
        model_label=reference_run.model_label,
        version=1,
        method="platt",
        params={"slope": 1.0, "intercept": 0.0},
        n_labels=30,
        positives=30,
        labels=[{"spectrum_id": row.pk, "value": "YES", "raw": 0.95} for row in spectra],
    )
    return reference_run


def checked(run) -> ShiftCheck:
    pending = ShiftCheck.objects.filter(run=run).latest("id")
    return shifts.shift_check_run(check_id=pending.pk)


def reasons(run) -> set[str]:
    return set(Candidate.objects.filter(run=run).values_list("triage_reason", flat=True))


# --- service --------------------------------------------------------------------------------


def test_it_holds_confident_answers_until_the_run_is_compared(calibrated, owner):
    run = confident(stored(30, noise=0.02, seed=2), owner)
    check = ShiftCheck.objects.get(run=run)
    assert check.state == ShiftState.PENDING
    assert Job.objects.filter(kind=shifts.SHIFT_JOB, params__check_id=check.pk).exists()
    assert reasons(run) == {TriageReason.SHIFT_PENDING}
    assert not Candidate.objects.filter(run=run, needs_expert=False).exists()


def test_it_releases_a_run_drawn_from_the_calibration_distribution(calibrated, owner):
    run = confident(stored(30, noise=0.02, seed=3), owner)
    check = checked(run)
    assert check.state == ShiftState.CLEAR and check.shifted_groups == []
    assert reasons(run) == {""}
    assert check.routed == {"to_experts": 0, "released": 30}
    assert not CatalogEntry.objects.filter(run=run, shifted=True).exists()


def test_it_sends_the_confident_answers_of_a_shifted_run_to_experts(calibrated, owner):
    run = confident(stored(30, noise=0.4, seed=4), owner)  # S/N 2-3 against 50
    check = checked(run)
    assert check.state == ShiftState.SHIFTED and check.shifted_groups == ["survey=TEST"]
    snr = next(f for g in check.groups if g["key"] == "" for f in g["features"])
    assert snr["feature"] == "snr" and snr["shifted"] and snr["psi"] >= 0.25
    assert reasons(run) == {TriageReason.DISTRIBUTION_SHIFT}
    assert CatalogEntry.objects.filter(run=run, shifted=True).count() == 30
    # a candidate finishing afterwards is held too
    later = confident(stored(1, noise=0.4, seed=5), owner)
    assert later.pk != run.pk  # its own run: held while its own check is pending
    assert reasons(later) == {TriageReason.SHIFT_PENDING}


def test_it_holds_only_the_subset_from_a_survey_the_calibration_set_lacks(calibrated, owner):
    spectra = stored(20, noise=0.02, seed=6) + stored(20, noise=0.02, survey="RED", lo=6000.0)
    run = confident(spectra, owner)
    check = checked(run)
    assert check.shifted_groups == ["survey=RED"]
    held = Candidate.objects.filter(run=run, triage_reason=TriageReason.DISTRIBUTION_SHIFT)
    assert set(held.values_list("spectrum__survey", flat=True)) == {"RED"}
    assert Candidate.objects.filter(run=run, triage_reason="").count() == 20


def test_it_keeps_a_low_confidence_answer_low_confidence(calibrated, owner):
    spectra = stored(30, noise=0.4, seed=7)
    verdicts = {row.pk: ("YES", 0.95) for row in spectra} | {spectra[0].pk: ("YES", 0.55)}
    run = make_inspected(spectra=spectra, verdicts=verdicts, created_by=owner)
    checked(run)
    low = Candidate.objects.get(run=run, spectrum=spectra[0])
    assert low.triage_reason == TriageReason.LOW_CONFIDENCE


def test_it_checks_no_run_whose_model_has_no_calibration_set(owner):
    run = confident(stored(12, noise=0.4, seed=8), owner)
    assert not ShiftCheck.objects.filter(run=run).exists()
    assert reasons(run) == {""}


def test_it_releases_a_shifted_run_once_vetted_labels_recalibrate_it(
    calibrated, owner, expert, outsider, staff
):
    run = confident(stored(30, noise=0.4, seed=9), owner)
    assert checked(run).state == ShiftState.SHIFTED
    for candidate in Candidate.objects.filter(run=run).order_by("pk")[:20]:
        for user in (expert, outsider):
            from annotation.inspections.services import expert_decision_record

            expert_decision_record(candidate=candidate, expert=user, decision="YES")
    result = learning_services.recalibrate_task(
        task=run.task, model_key=run.model_key, actor=staff, job=None
    )
    (recheck,) = result[run.model_key]["shift_checks"]
    assert recheck["state"] == ShiftState.RECALIBRATED
    latest = ShiftCheck.objects.filter(run=run).latest("id")
    assert latest.state == ShiftState.RECALIBRATED and latest.shifted_groups == []
    assert not Candidate.objects.filter(run=run, triage_reason__in=HELD).exists()
    assert not CatalogEntry.objects.filter(run=run, shifted=True).exists()


def test_it_keeps_a_shifted_run_held_when_too_few_labels_recalibrate_it(
    calibrated, owner, expert, outsider, staff
):
    run = confident(stored(30, noise=0.4, seed=10), owner)
    checked(run)
    from annotation.inspections.services import expert_decision_record

    for candidate in Candidate.objects.filter(run=run).order_by("pk")[:5]:
        for user in (expert, outsider):
            expert_decision_record(candidate=candidate, expert=user, decision="YES")
    learning_services.recalibrate_task(
        task=run.task, model_key=run.model_key, actor=staff, job=None
    )
    assert ShiftCheck.objects.filter(run=run).latest("id").state == ShiftState.SHIFTED
    assert Candidate.objects.filter(run=run, triage_reason="").count() == 0


# --- page, API, catalog -------------------------------------------------------------------------


def test_it_flags_a_shifted_run_on_its_page(calibrated, owner, staff):
    run = confident(stored(30, noise=0.4, seed=11), owner)
    checked(run)
    client = Client()
    client.force_login(staff)
    body = client.get(reverse("run_detail", args=[run.pk])).content.decode()
    assert 'id="shift"' in body and "Distribution shift: shifted" in body
    assert "survey=TEST" in body and "S/N (DER_SNR)" in body


def test_it_says_on_the_page_that_answers_wait_for_the_comparison(calibrated, owner, staff):
    run = confident(stored(12, noise=0.02, seed=12), owner)
    client = Client()
    client.force_login(staff)
    body = client.get(reverse("run_detail", args=[run.pk])).content.decode()
    assert "Distribution shift: pending" in body and "wait for experts (12 now)" in body


def test_it_says_why_a_run_without_a_calibration_set_was_not_compared(owner, staff):
    run = confident(stored(12, noise=0.02, seed=17), owner)
    assert not ShiftCheck.objects.filter(run=run).exists()
    client = Client()
    client.force_login(staff)
    body = client.get(reverse("run_detail", args=[run.pk])).content.decode()
    assert 'id="shift"' in body and "Distribution shift: not checked" in body
    assert "no calibration set to compare" in body and "without a shift check" in body
    api = APIClient()
    api.force_authenticate(staff)
    shift = api.get(reverse("api_run_detail", args=[run.pk])).json()["shift"]
    assert shift["state"] == "not checked" and not shift["flagged"]
    assert "no recalibration on task CV" in shift["reason"]


def test_it_reports_the_shift_in_the_run_api(calibrated, owner, staff):
    run = confident(stored(30, noise=0.4, seed=13), owner)
    checked(run)
    client = APIClient()
    client.force_authenticate(staff)
    shift = client.get(reverse("api_run_detail", args=[run.pk])).json()["shift"]
    assert shift["state"] == "shifted" and shift["flagged"]
    assert shift["shifted_groups"] == ["survey=TEST"] and shift["held_for_experts"] == 30
    assert {f["feature"] for g in shift["groups"] for f in g["features"]} >= {"snr", "red_edge"}


def test_it_compares_a_run_again_through_the_api(calibrated, owner, outsider):
    run = confident(stored(30, noise=0.02, seed=14), owner)
    checked(run)
    client = APIClient()
    client.force_authenticate(owner)
    response = client.post(reverse("api_run_shift_check", args=[run.pk]))
    assert response.status_code == 202 and response.json()["state"] == "pending"
    assert reasons(run) == {TriageReason.SHIFT_PENDING}
    other = APIClient()
    other.force_authenticate(outsider)
    assert other.post(reverse("api_run_shift_check", args=[run.pk])).status_code in (403, 404)


def test_it_refuses_a_comparison_without_a_calibration_set(owner):
    run = confident(stored(12, noise=0.02, seed=15), owner)
    client = APIClient()
    client.force_authenticate(owner)
    response = client.post(reverse("api_run_shift_check", args=[run.pk]))
    assert response.status_code == 409
    assert "no calibration set" in response.json()["detail"]


def test_it_filters_the_catalog_by_shift(calibrated, owner, staff):
    shifted = confident(stored(30, noise=0.4, seed=16), owner)
    checked(shifted)
    client = APIClient()
    client.force_authenticate(staff)
    rows = client.get(reverse("api_catalog_list"), {"shifted": "yes"}).json()["results"]
    assert rows and {row["run"] for row in rows} == {shifted.pk}
    assert all(row["shifted"] for row in rows)
    unshifted = client.get(reverse("api_catalog_list"), {"shifted": "no"}).json()["results"]
    assert shifted.pk not in {row["run"] for row in unshifted}
    page = Client()
    page.force_login(staff)
    body = page.get(reverse("catalog_list"), {"shifted": "yes"}).content.decode()
    assert 'class="badge shifted"' in body
