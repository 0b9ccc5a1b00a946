"""Staff's bulk actions on the vetting queue (issue 26): reassign, close with a reason, requeue;
each through a service, audit-logged, refused to everyone else; and the queue's metadata filters."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from annotation.catalog import selectors as catalog
from annotation.catalog.queue import queue_for_user
from annotation.core.errors import NotAllowed, WorkflowError
from annotation.core.models import AuditLog
from annotation.inspections import queue_actions, services
from annotation.inspections.models import Candidate, InspectionRun
from annotation.spectra.models import Spectrum
from tests.factories import UserFactory
from tests.web.catalog import test_vetting

pytestmark = pytest.mark.django_db
run_candidates = test_vetting.run_candidates  # the fixture


def client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def waiting_for(user) -> list[int]:
    return list(queue_for_user(catalog.vetting_queue(user), user).values_list("pk", flat=True))


def act(client, action, candidates, **extra):
    return client.post(
        reverse("vetting_manage_act"),
        {"action": action, "candidate": [c.pk for c in candidates], **extra},
    )


@pytest.mark.parametrize("who", ["expert", "viewer", "ml_engineer", "rater"])
def test_it_refuses_everyone_but_staff_and_changes_nothing(request, run_candidates, who):
    first, second = run_candidates([0.6, 0.6])
    attacker = client_for(request.getfixturevalue(who))
    assert attacker.get(reverse("vetting_manage")).status_code == 403
    for action, extra in (
        ("close", {"reason": "spam"}),
        ("reassign", {"expert": who}),
        ("requeue", {}),
    ):
        assert act(attacker, action, [first, second], **extra).status_code == 403
    assert not AuditLog.objects.filter(action__startswith="vetting_").exists()
    rows = Candidate.objects.filter(pk__in=[first.pk, second.pk])
    assert set(rows.values_list("queue_closed_reason", "assigned_to", "needs_expert")) == {
        ("", None, True)
    }


def test_it_refuses_a_non_staff_caller_of_the_services_too(run_candidates, expert):
    (candidate,) = run_candidates([0.6])
    with pytest.raises(NotAllowed):
        queue_actions.candidates_close(candidate_ids=[candidate.pk], reason="x", actor=expert)
    with pytest.raises(NotAllowed):
        queue_actions.candidates_requeue(candidate_ids=[candidate.pk], actor=expert)


def test_it_refuses_the_bulk_api_to_non_staff(run_candidates, expert):
    (candidate,) = run_candidates([0.6])
    client = APIClient()
    client.force_authenticate(expert)
    response = client.post(
        reverse("api_vetting_queue_action"),
        {"action": "close", "candidates": [candidate.pk], "reason": "spam"},
        format="json",
    )
    assert response.status_code == 403
    assert Candidate.objects.get(pk=candidate.pk).queue_closed_reason == ""


def test_it_reassigns_candidates_to_one_expert_and_back_to_everyone(
    run_candidates, staff, expert, outsider
):
    first, second, third = run_candidates([0.6, 0.6, 0.6])
    response = act(client_for(staff), "reassign", [first, second], expert="outsider")
    assert response.status_code == 302
    assert waiting_for(expert) == [third.pk]
    assert waiting_for(outsider) == [first.pk, second.pk, third.pk]
    logs = AuditLog.objects.filter(action="vetting_reassigned", actor=staff)
    assert sorted(int(log.object_pk) for log in logs) == [first.pk, second.pk]
    assert {log.data["to"] for log in logs} == {outsider.pk}
    # the expert's page and the API agree with the queue
    page = client_for(expert).get(reverse("vetting_queue"))
    assert page.context["candidate"] == third and page.context["remaining"] == 1
    api = APIClient()
    api.force_authenticate(expert)
    assert api.get(reverse("api_vetting_next")).json()["remaining"] == 1
    act(client_for(staff), "reassign", [first], expert="")
    assert waiting_for(expert) == [first.pk, third.pk]


def test_it_refuses_to_assign_a_non_expert_or_one_who_decided(
    run_candidates, staff, outsider, viewer
):
    (candidate,) = run_candidates([0.6])
    services.expert_decision_record(candidate=candidate, expert=outsider, decision="YES")
    client = client_for(staff)
    for name, message in (("viewer", "may not vet"), ("outsider", "has decided candidates")):
        response = act(client, "reassign", [candidate], expert=name)
        page = client.get(response["Location"]).content.decode()
        assert message in page
    assert Candidate.objects.get(pk=candidate.pk).assigned_to is None
    assert not AuditLog.objects.filter(action="vetting_reassigned").exists()


def test_it_closes_with_a_reason_and_requeues(run_candidates, staff, expert):
    first, second = run_candidates([0.6, 0.6])
    client = client_for(staff)
    refused = act(client, "close", [first], reason="   ")
    assert "say why" in client.get(refused["Location"]).content.decode()
    assert waiting_for(expert) == [first.pk, second.pk]

    act(client, "close", [first], reason="duplicate of a vetted spectrum")
    assert waiting_for(expert) == [second.pk]
    assert Candidate.objects.get(pk=first.pk).queue_closed_reason == (
        "duplicate of a vetted spectrum"
    )
    closed = client.get(reverse("vetting_manage"), {"status": "closed"})
    assert [c.pk for c in closed.context["page"]] == [first.pk]
    assert "duplicate of a vetted spectrum" in closed.content.decode()

    act(client, "requeue", [first])
    assert waiting_for(expert) == [first.pk, second.pk]
    actions = list(
        AuditLog.objects.filter(object_pk=str(first.pk), action__startswith="vetting_")
        .order_by("id")
        .values_list("action", "to_state")
    )
    assert actions == [("vetting_closed", "closed"), ("vetting_requeued", "open")]


def test_it_requeues_a_candidate_the_triage_never_sent_to_experts(run_candidates, staff, expert):
    unsure, confident = run_candidates([0.6, 0.95])
    assert waiting_for(expert) == [unsure.pk]
    unrouted = client_for(staff).get(reverse("vetting_manage"), {"status": "unrouted"})
    assert [c.pk for c in unrouted.context["page"]] == [confident.pk]
    act(client_for(staff), "requeue", [confident])
    assert waiting_for(expert) == [unsure.pk, confident.pk]


def test_it_refuses_an_empty_or_unfinished_selection(run_candidates, staff):
    (candidate,) = run_candidates([0.6])
    Candidate.objects.filter(pk=candidate.pk).update(state="running")
    with pytest.raises(WorkflowError, match="not finished"):
        queue_actions.candidates_requeue(candidate_ids=[candidate.pk], actor=staff)
    with pytest.raises(WorkflowError, match="at least one"):
        queue_actions.candidates_requeue(candidate_ids=[], actor=staff)


def test_it_filters_the_queue_by_metadata(run_candidates, staff):
    low, high, other = run_candidates([0.6, 0.6, 0.6])
    Spectrum.objects.filter(pk=low.spectrum_id).update(snr=4.0, dataset="lamost-dr7")
    Spectrum.objects.filter(pk=high.spectrum_id).update(snr=40.0, dataset="lamost-dr7")
    Spectrum.objects.filter(pk=other.spectrum_id).update(snr=20.0, dataset="sdss")
    InspectionRun.objects.update(model_key="rule-based@1", model_label="rule-based 1")
    client = client_for(staff)

    def shown(**params):
        response = client.get(reverse("vetting_manage"), params)
        assert response.status_code == 200
        return [c.pk for c in response.context["page"]]

    assert shown() == [low.pk, high.pk, other.pk]
    assert shown(dataset="lamost-dr7") == [low.pk, high.pk]
    assert shown(snr_min="10", snr_max="30") == [other.pk]
    assert shown(dataset="lamost-dr7", snr_min="10") == [high.pk]
    assert shown(task="cv", verdict="NO", model="rule-based@1") == [low.pk, high.pk, other.pk]
    assert shown(verdict="YES") == []
    assert shown(model="checkpoint:abc") == []
    bad = client.get(reverse("vetting_manage"), {"snr_min": "9", "snr_max": "3"})
    assert bad.status_code == 400 and "snr_min (9.0) is above snr_max (3.0)" in bad.content.decode()


def test_it_closes_through_the_api_for_staff(run_candidates, staff, expert):
    first, second = run_candidates([0.6, 0.6])
    client = APIClient()
    client.force_authenticate(staff)
    url = reverse("api_vetting_queue_action")
    response = client.post(
        url, {"action": "close", "candidates": [first.pk], "reason": "bad file"}, format="json"
    )
    assert response.status_code == 200
    assert response.json() == {"action": "close", "candidates": [first.pk]}
    assert waiting_for(expert) == [second.pk]
    response = client.post(url, {"action": "close", "candidates": [first.pk]}, format="json")
    assert response.status_code == 400


def test_it_refuses_to_assign_an_expert_who_may_not_read_the_candidate(
    run_candidates, staff, monkeypatch
):
    (candidate,) = run_candidates([0.6])
    blinded = UserFactory(username="blinded", roles=["expert"])
    from annotation import blinding

    real = blinding.candidates_visible_to

    def hiding(*, user, rows=None):
        rows = real(user=user, rows=rows)
        return rows.none() if user.pk == blinded.pk else rows

    monkeypatch.setattr(blinding, "candidates_visible_to", hiding)
    client = client_for(staff)
    response = act(client, "reassign", [candidate], expert="blinded")
    assert "may not read 1 of these candidates" in client.get(response["Location"]).content.decode()
    assert Candidate.objects.get(pk=candidate.pk).assigned_to is None


def test_it_refuses_a_candidate_id_past_64_bits_as_bad_input(staff):
    client = APIClient()
    client.force_authenticate(staff)
    response = client.post(
        reverse("api_vetting_queue_action"),
        {"action": "requeue", "candidates": [2**70]},
        format="json",
    )
    assert response.status_code == 400  # was a 500 (SQLite: OverflowError inside IN (...))
    assert "candidates" in response.json()
