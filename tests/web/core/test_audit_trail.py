"""The audit log records every decision and is append-only (issue 11, "Workflow and audit trail").

Deleting a user with history is refused (PROTECT, with the admin's explanation): an audit row
is never updated or removed, so the actor cannot be nulled or cascaded away; deactivate the
account instead. Users without history delete normally.
"""

from __future__ import annotations

import json

import pytest
from django.contrib.admin.sites import site
from django.db import DatabaseError, connection, transaction
from django.db.models import ProtectedError
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from annotation.core import services as core_services
from annotation.core.models import AuditLog
from annotation.curation import services as curation_services
from annotation.curation.models import CurationState
from annotation.inspections import services as inspections_services
from annotation.inspections.models import Candidate, CandidateState, InspectionRun
from annotation.rating import services as rating_services
from annotation.rating.models import PairJudgement, RatingAssignment
from annotation.spectra.models import Spectrum, Task
from tests.factories import UserFactory, make_curation, make_spectrum
from tests.web.rating.test_campaigns import make_campaign

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_user(db):
    return UserFactory(username="root", is_staff=True, is_superuser=True)


@pytest.fixture
def admin_client(admin_user) -> Client:
    client = Client()
    client.force_login(admin_user)
    return client


@pytest.fixture
def raters(db):
    return [UserFactory(username=f"rater{i}", roles=["rater"]) for i in range(2)]


def entries(action: str, obj) -> list[AuditLog]:
    return list(
        AuditLog.objects.filter(
            action=action, object_type=type(obj).__name__, object_pk=str(obj.pk)
        )
    )


# --- decisions are recorded ------------------------------------------------------------------


def test_it_records_each_score_with_the_previous_one(raters, staff):
    campaign = make_campaign(raters, staff, n=2, per_item=2)
    assignment = RatingAssignment.objects.filter(item__campaign=campaign, rater=raters[0]).first()
    rating_services.rating_submit(assignment=assignment, rater=raters[0], score=2)
    rating_services.rating_submit(
        assignment=assignment, rater=raters[0], score=4, comment="on reflection"
    )

    logged = entries("rating_scored", assignment)
    assert [(e.actor, e.from_state, e.to_state) for e in logged] == [
        (raters[0], "", "2"),
        (raters[0], "2", "4"),
    ]
    assert logged[1].comment == "on reflection"
    assert logged[1].data["campaign"] == campaign.pk


def test_it_records_each_pair_judgement(raters, staff):
    campaign = make_campaign(raters, staff, n=2, per_item=1)
    a, b = campaign.items.order_by("source")[:2]
    b.spectrum = a.spectrum
    b.save()
    pair = rating_services.campaign_add_pairs(
        campaign=campaign, pairs=[(a, b)], raters_per_pair=1, actor=None
    )[0]
    judgement = PairJudgement.objects.get(pair=pair)
    rating_services.pair_judgement_submit(judgement=judgement, rater=judgement.rater, outcome="tie")

    [logged] = entries("pair_judged", judgement)
    assert (logged.actor, logged.from_state, logged.to_state) == (judgement.rater, "", "tie")


def test_it_records_a_vetting_decision(db):
    expert = UserFactory(username="vetter", roles=["expert"])
    run = InspectionRun.objects.create(task=Task.objects.get(code="CV"), policy_spec={})
    candidate = Candidate.objects.create(run=run, spectrum=make_spectrum(), state="done")
    assert candidate.state == CandidateState.DONE
    inspections_services.expert_decision_record(
        candidate=candidate, expert=expert, decision="NO", comment="x"
    )

    [logged] = entries("expert_decision", candidate)
    assert (logged.actor, logged.to_state, logged.comment) == (expert, "NO", "x")


# --- admin edits go through the services ------------------------------------------------------


def form_data(model_admin, request, obj=None) -> dict[str, object]:
    """What the admin's own form would post back for ``obj`` unchanged (or empty)."""
    form = model_admin.get_form(request, obj)(instance=obj)
    data: dict[str, object] = {}
    for name in form.fields:
        value = form[name].value()
        data[name] = "" if value is None else value
    return data


def admin_request(admin_user):
    from django.test import RequestFactory

    request = RequestFactory().get("/")
    request.user = admin_user
    return request


def test_it_records_an_admin_change_of_a_spectrum_label(admin_client, admin_user):
    spectrum = make_spectrum(label="YES", task=Task.objects.get(code="CV"))
    data = form_data(site._registry[Spectrum], admin_request(admin_user), spectrum)
    data["label"] = "NO"
    url = reverse("admin:annotation_spectrum_change", args=[spectrum.pk])
    response = admin_client.post(url, data)
    assert response.status_code == 302, response.content.decode()[:2000]

    spectrum.refresh_from_db()
    assert spectrum.label == "NO"
    [logged] = entries("admin_changed", spectrum)
    assert logged.actor == admin_user
    assert logged.data["fields"] == {"label": ["YES", "NO"]}
    assert "label: YES -> NO" in logged.comment


def test_it_records_adding_changing_and_deleting_a_task_in_the_admin(admin_client, admin_user):
    model_admin = site._registry[Task]
    request = admin_request(admin_user)
    data = form_data(model_admin, request)
    data.update(
        code="LBV",
        name="Luminous blue variables",
        question="Is it an LBV?",
        guideline="P Cygni profiles.",
        windows=json.dumps(
            [
                {
                    "name": "H-alpha",
                    "rest_range": [6500.0, 6630.0],
                    "lines": [6564.6],
                    "kind": "emission",
                    "look_for": "P Cygni profile",
                }
            ]
        ),
        contaminants=json.dumps(["Be stars"]),
    )
    response = admin_client.post(reverse("admin:annotation_task_add"), data)
    assert response.status_code == 302, response.content.decode()[:2000]
    task = Task.objects.get(code="LBV")
    [added] = entries("admin_added", task)
    assert added.data["fields"]["code"] == [None, "LBV"]

    data = form_data(model_admin, request, task)
    data["guideline"] = "P Cygni profiles in Balmer lines."
    response = admin_client.post(reverse("admin:annotation_task_change", args=[task.pk]), data)
    assert response.status_code == 302
    [changed] = entries("admin_changed", task)
    assert changed.data["fields"] == {
        "guideline": ["P Cygni profiles.", "P Cygni profiles in Balmer lines."]
    }

    pk = task.pk
    response = admin_client.post(
        reverse("admin:annotation_task_delete", args=[pk]), {"post": "yes"}
    )
    assert response.status_code == 302
    assert not Task.objects.filter(pk=pk).exists()
    deleted = AuditLog.objects.get(action="admin_deleted", object_type="Task", object_pk=str(pk))
    assert deleted.data["fields"]["code"] == "LBV"


def test_it_records_each_object_of_a_bulk_delete_in_the_admin(admin_client):
    spectra = [make_spectrum(object_id=f"BULK-{i}", seed=i) for i in range(2)]
    response = admin_client.post(
        reverse("admin:annotation_spectrum_changelist"),
        {"action": "delete_selected", "_selected_action": [s.pk for s in spectra], "post": "yes"},
    )
    assert response.status_code == 302
    assert not Spectrum.objects.filter(pk__in=[s.pk for s in spectra]).exists()
    logged = AuditLog.objects.filter(action="admin_deleted", object_type="Spectrum")
    assert sorted(logged.values_list("object_pk", flat=True)) == sorted(str(s.pk) for s in spectra)


# --- nobody changes the log ------------------------------------------------------------------


def test_it_gives_the_admin_a_read_only_log(admin_client, staff):
    entry = core_services.audit_log_record(actor=staff, action="test_entry", obj=staff)
    assert admin_client.get(reverse("admin:annotation_auditlog_changelist")).status_code == 200
    assert admin_client.get(reverse("admin:annotation_auditlog_add")).status_code == 403
    change_url = reverse("admin:annotation_auditlog_change", args=[entry.pk])
    admin_client.post(change_url, {"action": "rewritten", "comment": "rewritten"})
    delete_url = reverse("admin:annotation_auditlog_delete", args=[entry.pk])
    assert admin_client.post(delete_url, {"post": "yes"}).status_code == 403
    entry.refresh_from_db()
    assert entry.action == "test_entry"


def test_it_refuses_bulk_updates_and_deletes_through_the_orm(staff):
    core_services.audit_log_record(actor=staff, action="test_entry", obj=staff)
    rows = AuditLog.objects.filter(action="test_entry")
    with pytest.raises(ValueError, match="append-only"):
        rows.update(comment="rewritten")
    with pytest.raises(ValueError, match="append-only"):
        rows.delete()
    assert rows.get().comment == ""


@pytest.mark.postgres
@pytest.mark.skipif(connection.vendor != "postgresql", reason="the trigger is PostgreSQL's")
@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE annotation_auditlog SET comment = 'rewritten' WHERE id = %s",
        "DELETE FROM annotation_auditlog WHERE id = %s",
    ],
)
def test_it_refuses_raw_updates_and_deletes_in_the_database(staff, statement):
    entry = core_services.audit_log_record(actor=staff, action="test_entry", obj=staff)
    with pytest.raises(DatabaseError, match="append-only"):  # noqa: SIM117
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(statement, [entry.pk])
    entry.refresh_from_db()
    assert entry.comment == ""


# --- users with history ------------------------------------------------------------------------


def test_it_refuses_to_delete_a_user_with_history_and_says_why(admin_client, staff):
    core_services.audit_log_record(actor=staff, action="test_entry", obj=staff)
    with pytest.raises(ProtectedError):
        staff.delete()

    url = reverse("admin:auth_user_delete", args=[staff.pk])
    page = admin_client.get(url).content.decode()
    assert "Cannot delete user" in page
    assert "audit log" in page
    admin_client.post(url, {"post": "yes"})
    assert type(staff).objects.filter(pk=staff.pk).exists()
    assert AuditLog.objects.filter(actor=staff).count() == 1


def test_it_deletes_a_user_without_history(db):
    user = UserFactory(username="passerby")
    user.delete()
    assert not type(user).objects.filter(username="passerby").exists()


# --- discard reasons ---------------------------------------------------------------------------


def test_it_shows_who_discarded_a_trajectory_and_why(db):
    expert = UserFactory(username="screener", roles=["expert"])
    curation = make_curation()
    curation_services.curation_screen(
        curation=curation, user=expert, keep=False, reason="The windows miss H-alpha <b>x</b>"
    )
    assert curation.state == CurationState.DISCARDED

    client = Client()
    client.force_login(expert)
    page = client.get(reverse("curation_detail", args=[curation.pk])).content.decode()
    assert 'id="discard-reason"' in page
    assert "The windows miss H-alpha &lt;b&gt;x&lt;/b&gt;" in page

    api = APIClient()
    api.force_authenticate(expert)
    data = api.get(reverse("api_curation_detail", args=[curation.pk])).json()
    assert data["discard"]["by"] == "screener"
    assert data["discard"]["reason"] == "The windows miss H-alpha <b>x</b>"


def test_it_shows_no_discard_reason_on_a_kept_trajectory(db):
    expert = UserFactory(username="screener", roles=["expert"])
    curation = make_curation()
    curation_services.curation_screen(curation=curation, user=expert, keep=True)
    api = APIClient()
    api.force_authenticate(expert)
    assert api.get(reverse("api_curation_detail", args=[curation.pk])).json()["discard"] is None


# --- the staff's audit log page and API --------------------------------------------------------


@pytest.fixture
def logged(staff, raters):
    for _ in range(3):
        core_services.audit_log_record(actor=raters[0], action="rating_scored", obj=raters[0])
    core_services.audit_log_record(actor=raters[1], action="pair_judged", obj=raters[1])
    core_services.audit_log_record(actor=staff, action="campaign_closed", obj=staff, comment="done")


def test_it_shows_staff_the_log_filtered_by_actor_action_and_object(staff, raters, logged):
    client = Client()
    client.force_login(staff)
    page = client.get(reverse("audit_log"), {"action": "campaign_closed"}).content.decode()
    assert "campaign_closed" in page and "pair_judged" not in page

    api = APIClient()
    api.force_authenticate(staff)
    url = reverse("api_audit_log")
    by_actor = api.get(url, {"actor": "rater0"}).json()
    assert by_actor["count"] == 3
    assert {row["action"] for row in by_actor["results"]} == {"rating_scored"}
    by_object = api.get(url, {"object_type": "User", "object_pk": str(raters[1].pk)}).json()
    assert [row["action"] for row in by_object["results"]] == ["pair_judged"]
    newest_first = api.get(url).json()["results"]
    assert [row["id"] for row in newest_first] == sorted(
        (row["id"] for row in newest_first), reverse=True
    )


def test_it_paginates_the_log(staff, settings):
    for i in range(55):
        core_services.audit_log_record(actor=staff, action="bulk", obj=staff, comment=str(i))
    client = Client()
    client.force_login(staff)
    second = client.get(reverse("audit_log"), {"action": "bulk", "page": 2})
    assert second.context["page"].number == 2
    assert len(second.context["page"].object_list) == 5

    api = APIClient()
    api.force_authenticate(staff)
    data = api.get(reverse("api_audit_log"), {"action": "bulk", "page": 2}).json()
    assert data["count"] == 55 and len(data["results"]) == 5


@pytest.mark.parametrize("roles", [["expert"], ["rater"], ["ml_engineer"], ["viewer"]])
def test_it_keeps_the_log_from_everyone_but_staff(roles, logged):
    user = UserFactory(username="curious", roles=roles)
    client = Client()
    client.force_login(user)
    assert client.get(reverse("audit_log")).status_code == 403
    api = APIClient()
    api.force_authenticate(user)
    assert api.get(reverse("api_audit_log")).status_code == 403


def test_it_documents_the_audit_log_api_and_its_filters(staff):
    api = APIClient()
    api.force_authenticate(staff)
    schema = api.get(reverse("api_schema"), {"format": "json"}).json()
    operation = schema["paths"]["/api/audit-log/"]["get"]
    names = {parameter["name"] for parameter in operation["parameters"]}
    assert {"object_type", "object_pk", "actor", "action", "page"} <= names
