"""The calibration and model-comparison pages open on a task that has data, or say there is none
and where there is (issue 37 item 8: both opened on task A, which had nothing)."""

from __future__ import annotations

import pytest
from django.urls import reverse

from annotation.spectra.models import Task
from tests.factories import make_inspected, make_spectrum

pytestmark = pytest.mark.django_db


def inspect_cv(owner, *models: tuple[str, str]) -> None:
    spectra = [make_spectrum(object_id=f"OPEN-{i}", seed=i) for i in range(3)]
    for model in models:
        make_inspected(
            spectra=spectra,
            verdicts={row.pk: ("YES", 0.8) for row in spectra},
            created_by=owner,
            model=model,
        )


def test_it_needs_a_first_task_without_data_for_these_tests_to_mean_something(db):
    first = Task.objects.order_by("code").values_list("code", flat=True).first()
    assert first is not None and first != "CV"


def test_it_opens_the_calibration_page_on_a_task_with_answers(expert_client, owner):
    inspect_cv(owner, ("rule-based@v1", "rule-based v1"))
    page = expert_client.get(reverse("calibration"))
    assert page.status_code == 200
    assert page.context["task"].code == "CV"
    assert 'id="no-models"' not in page.content.decode()


def test_it_names_the_tasks_with_answers_when_the_chosen_one_has_none(expert_client, owner):
    inspect_cv(owner, ("rule-based@v1", "rule-based v1"))
    body = expert_client.get(reverse("calibration"), {"task": "WD"}).content.decode()
    assert "No model has answered WD yet." in body
    assert 'Tasks with answers: <a href="?task=CV">CV</a>' in body


def test_it_says_no_task_has_answers_on_an_empty_calibration_page(expert_client):
    body = expert_client.get(reverse("calibration")).content.decode()
    assert "No model has answered any task yet" in body


def test_it_opens_the_comparison_on_a_task_with_two_models(expert_client, owner):
    inspect_cv(owner, ("rule-based@v1", "rule-based v1"), ("checkpoint:abc", "checkpoint abc"))
    page = expert_client.get(reverse("catalog_compare"))
    assert page.status_code == 200
    assert page.context["task"] == "CV"
    assert "comparison" in page.context
    assert 'id="nothing-to-compare"' not in page.content.decode()


def test_it_says_a_comparison_needs_two_models(expert_client, owner):
    inspect_cv(owner, ("rule-based@v1", "rule-based v1"))
    page = expert_client.get(reverse("catalog_compare"))
    assert page.context["task"] == "CV"
    assert "Only one model has answered CV: a comparison needs two." in page.content.decode()
    other = expert_client.get(reverse("catalog_compare"), {"task": "WD"}).content.decode()
    assert "No model has answered WD yet." in other
    assert '<a href="?task=CV">CV</a>' in other


def test_it_says_no_task_has_models_on_an_empty_comparison_page(expert_client):
    body = expert_client.get(reverse("catalog_compare")).content.decode()
    assert "No model has answered any task yet" in body
