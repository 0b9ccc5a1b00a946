from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from annotation.spectra.models import Task
from annotation.spectra.selectors import task_value

pytestmark = pytest.mark.django_db


def valid_task(**overrides) -> Task:
    fields = {
        "code": "LBV",
        "name": "Luminous blue variables (LBV)",
        "question": 'Analyze the provided spectrum to determine if it is a "LBV".',
        "guideline": "Look for P Cygni profiles in Balmer and Fe II lines.",
        "windows": [
            {
                "name": "H-alpha",
                "rest_range": [6500.0, 6630.0],
                "lines": [6564.6],
                "kind": "emission",
                "look_for": "P Cygni profile",
            }
        ],
        "contaminants": ["Be stars"],
    }
    return Task(**(fields | overrides))


def test_it_accepts_a_task_added_without_code():
    task = valid_task()
    task.full_clean()
    task.save()
    assert task_value(task).windows[0].name == "H-alpha"


def test_it_refuses_a_window_with_an_inverted_range():
    bad_window = {
        "name": "H-alpha",
        "rest_range": [6630.0, 6500.0],
        "lines": [6564.6],
        "kind": "emission",
        "look_for": "x",
    }
    with pytest.raises(ValidationError, match="rest_range"):
        valid_task(windows=[bad_window]).full_clean()


def test_it_seeds_the_eight_builtin_tasks():
    assert set(Task.objects.filter(builtin=True).values_list("code", flat=True)) == {
        "CV",
        "CS",
        "SS",
        "MG",
        "WD",
        "O",
        "B",
        "A",
    }


def test_it_lets_staff_who_are_not_superusers_edit_tasks_but_not_delete_them(db, client):
    from django.urls import reverse

    from annotation.spectra.models import Task
    from tests.factories import UserFactory

    staff = UserFactory(roles=["staff"])
    assert not staff.is_superuser
    client.force_login(staff)
    task = Task.objects.get(code="CV")
    page = client.get(reverse("admin:annotation_task_change", args=[task.pk]))
    assert page.status_code == 200
    assert client.get(reverse("admin:annotation_task_delete", args=[task.pk])).status_code == 403
    expert = UserFactory(roles=["expert"])
    client.force_login(expert)
    assert client.get(reverse("admin:annotation_task_changelist")).status_code == 302  # login
