"""An expert cannot decide a candidate staff closed or assigned to another expert, whichever way
they reach it (the page by ?candidate=, the form's POST, the API), because the service refuses
it; an open audit sample's candidate and a gold item still take their answers (issue 26)."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from annotation.core.errors import WrongState
from annotation.inspections import queue_actions, services
from annotation.inspections.models import ExpertDecision
from annotation.learning.models import AuditSample, AuditSampleItem, GoldAnswer, GoldItem
from tests.factories import UserFactory
from tests.web.catalog import test_vetting

pytestmark = pytest.mark.django_db
run_candidates = test_vetting.run_candidates  # the fixture


def client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def api_decide(user, candidate, decision="YES"):
    client = APIClient()
    client.force_authenticate(user)
    return client.post(
        reverse("api_expert_decision_create"),
        {"candidate": candidate.pk, "decision": decision},
        format="json",
    )


@pytest.fixture
def closed_and_assigned(run_candidates, staff, expert):
    closed, assigned = run_candidates([0.6, 0.6])
    queue_actions.candidates_close(candidate_ids=[closed.pk], reason="bad file", actor=staff)
    colleague = UserFactory(username="colleague", roles=["expert"])
    queue_actions.candidates_reassign(candidate_ids=[assigned.pk], expert=colleague, actor=staff)
    return closed, assigned, colleague


def test_it_refuses_the_service_a_closed_or_elsewhere_assigned_candidate(
    closed_and_assigned, expert
):
    closed, assigned, colleague = closed_and_assigned
    with pytest.raises(WrongState, match="staff closed this candidate \\(bad file\\)"):
        services.expert_decision_record(candidate=closed, expert=expert, decision="YES")
    with pytest.raises(WrongState, match="assigned this candidate to another expert"):
        services.expert_decision_record(candidate=assigned, expert=expert, decision="YES")
    services.expert_decision_record(candidate=assigned, expert=colleague, decision="NO")
    assert list(ExpertDecision.objects.values_list("candidate", "expert", "decision")) == [
        (assigned.pk, colleague.pk, "NO")
    ]


def test_it_refuses_the_page_and_its_form(closed_and_assigned, expert):
    closed, assigned, _ = closed_and_assigned
    client = client_for(expert)
    for candidate, why in (
        (closed, "staff closed this candidate (bad file)"),
        (assigned, "another expert"),
    ):
        page = client.get(reverse("vetting_queue"), {"candidate": candidate.pk}).content.decode()
        assert "You cannot decide this candidate" in page and why in page
        assert 'action="/vetting/decide/"' not in page
        response = test_vetting.decide(client, candidate, "YES")
        shown = client.get(response["Location"]).content.decode()
        assert why in shown
    assert not ExpertDecision.objects.exists()


def test_it_answers_409_in_the_api(closed_and_assigned, expert):
    closed, assigned, _ = closed_and_assigned
    for candidate in (closed, assigned):
        response = api_decide(expert, candidate)
        assert response.status_code == 409, response.content
        assert "staff" in response.content.decode()
    assert not ExpertDecision.objects.exists()


def test_it_still_takes_decisions_on_an_open_audit_samples_candidate(
    closed_and_assigned, staff, expert
):
    closed, assigned, _ = closed_and_assigned
    sample = AuditSample.objects.create(
        task=closed.run.task, model_key=closed.run.model_key, per_stratum=1, created_by=staff
    )
    AuditSampleItem.objects.bulk_create(
        AuditSampleItem(sample=sample, candidate=c, stratum="s") for c in (closed, assigned)
    )
    page = client_for(expert).get(reverse("vetting_queue"), {"candidate": closed.pk})
    assert "You cannot decide" not in page.content.decode()
    test_vetting.decide(client_for(expert), closed, "YES")
    assert api_decide(expert, assigned, "NO").status_code == 201
    assert set(ExpertDecision.objects.values_list("candidate", "decision")) == {
        (closed.pk, "YES"),
        (assigned.pk, "NO"),
    }
    sample.open = False
    sample.save()
    assert api_decide(expert, assigned, "YES").status_code == 409


def test_it_still_takes_a_gold_answer_on_a_closed_candidate(closed_and_assigned, staff, expert):
    closed, _, _ = closed_and_assigned
    gold = GoldItem.objects.create(candidate=closed, answer="YES", marked_by=staff)
    page = client_for(expert).get(reverse("vetting_queue"), {"candidate": closed.pk})
    assert "You cannot decide" not in page.content.decode()
    assert api_decide(expert, closed, "YES").status_code == 201
    assert GoldAnswer.objects.get(gold=gold, vetter=expert).answer == "YES"
