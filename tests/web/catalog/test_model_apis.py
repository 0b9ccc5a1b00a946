"""The model comparison and promotion through the API (issue 32, item 11): the twins of
/catalog/compare/ and its promotion form, resolved by the page's rule (comparisons.model_choice)
and promoting through the page's service (staff only, audit-logged)."""

from __future__ import annotations

import pytest
from django.urls import reverse
from rest_framework.test import APIClient

from annotation.core.models import AuditLog
from annotation.inspections.models import ModelPromotion
from tests.web.catalog.test_model_lineage import CASES, world  # noqa: F401 (a fixture)

pytestmark = pytest.mark.django_db

OLD, NEW = "rule-based@v1", "checkpoint:abc123"


def api(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def test_it_compares_two_models_as_the_page_does(world, expert):  # noqa: F811
    answer = api(expert).get(reverse("api_model_comparison"), {"task": "CV", "new": NEW})
    assert answer.status_code == 200, answer.content
    body = answer.json()
    # The page's defaults: the baseline is the newest other model, none being current.
    assert (body["task"], body["new"], body["old"], body["current"]) == ("CV", NEW, OLD, None)
    assert [(m["key"], m["current"]) for m in body["models"]] == [(NEW, False), (OLD, False)]
    counts = {key: value for key, value in body["comparison"].items() if key != "rows"}
    assert counts == {
        "shared": 5,
        "flipped": 3,
        "fixed": 1,
        "broken": 1,
        "newly_uncertain": 1,
        "labelled": 4,
        "old_correct": 3,
        "new_correct": 3,
    }
    for row in body["comparison"]["rows"]:
        label, old, new = CASES[row["object_id"]]
        assert (row["label"], row["old"]["verdict"], row["new"]["verdict"]) == (
            label,
            old[0],
            new[0],
        )
    assert {row["object_id"]: row["outcome"] for row in body["comparison"]["rows"]} == {
        "CMP-fixed": "fixed",
        "CMP-broken": "broken",
        "CMP-flip-unlabelled": "flipped",
        "CMP-uncertain": "unchanged",
    }
    page = APIClient()
    page.force_login(expert)
    shown = page.get(reverse("catalog_compare"), {"task": "CV", "new": NEW}).context["comparison"]
    assert shown.as_dict() | {"task": "CV"} == {
        **counts,
        "task": "CV",
        "old_key": OLD,
        "new_key": NEW,
    }


def test_it_answers_one_model_with_no_comparison_and_refuses_unknown_choices(world, expert):  # noqa: F811
    same = api(expert).get(reverse("api_model_comparison"), {"task": "CV", "new": NEW, "old": NEW})
    assert same.status_code == 200 and same.json()["comparison"] is None
    for query, reason in (
        ({"task": "NOPE"}, "task must be one of"),
        ({"task": "CV", "new": "nope"}, "new: no model with key 'nope'"),
        ({"task": "CV", "old": "nope"}, "old: no model with key 'nope'"),
    ):
        refused = api(expert).get(reverse("api_model_comparison"), query)
        assert refused.status_code == 400 and reason in refused.json()["detail"], query
    nothing = api(expert).get(reverse("api_model_comparison"), {"task": "MG"})
    assert nothing.status_code == 200
    assert nothing.json() == {
        "task": "MG",
        "models": [],
        "current": None,
        "new": "",
        "old": "",
        "comparison": None,
    }


def test_it_lets_staff_promote_a_model_through_the_api_and_logs_it(world, staff, expert):  # noqa: F811
    promoted = api(staff).post(
        reverse("api_model_promote"),
        {"task": "CV", "model_key": NEW, "comment": "fixes more than it breaks"},
        format="json",
    )
    assert promoted.status_code == 201, promoted.content
    promotion = ModelPromotion.objects.get()
    assert promoted.json() == {
        "id": promotion.pk,
        "task": "CV",
        "model_key": NEW,
        "model_label": "checkpoint tiny · abc123",
        "run": world["new"].pk,
        "comment": "fixes more than it breaks",
        "promoted_by": staff.get_username(),
        "created_at": promoted.json()["created_at"],
    }
    logged = AuditLog.objects.get(action="model_promoted")
    assert logged.actor == staff and logged.data["model_key"] == NEW
    # The comparison now names it current and takes it as the baseline.
    body = api(expert).get(reverse("api_model_comparison"), {"task": "CV", "new": OLD}).json()
    assert (body["current"], body["old"]) == (NEW, NEW)
    assert [m["key"] for m in body["models"] if m["current"]] == [NEW]


def test_it_refuses_a_promotion_by_a_non_staff_user_or_of_an_unknown_model(world, staff, expert):  # noqa: F811
    refused = api(expert).post(
        reverse("api_model_promote"), {"task": "CV", "model_key": NEW}, format="json"
    )
    assert refused.status_code == 403 and "staff" in refused.json()["detail"]
    unknown = api(staff).post(
        reverse("api_model_promote"), {"task": "CV", "model_key": "nope"}, format="json"
    )
    assert unknown.status_code == 400 and "no model you may read" in unknown.json()["model_key"][0]
    wrong_task = api(staff).post(
        reverse("api_model_promote"), {"task": "MG", "model_key": NEW}, format="json"
    )
    assert wrong_task.status_code == 400
    no_task = api(staff).post(
        reverse("api_model_promote"), {"task": "NOPE", "model_key": NEW}, format="json"
    )
    # a write naming an object that does not exist is a 404 naming the field (issue 32 item 9)
    assert no_task.status_code == 404 and "task" in no_task.json()["detail"]
    assert not ModelPromotion.objects.exists()
    assert not AuditLog.objects.filter(action="model_promoted").exists()
