"""The Celery app. Embedded default: tasks run in-process (CELERY_TASK_ALWAYS_EAGER)."""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")

app = Celery("specvet")
app.config_from_object("django.conf:settings", namespace="CELERY")
# Each domain that runs background work keeps its Celery tasks in its own tasks module.
app.autodiscover_tasks(
    ["annotation.core", "annotation.inspections", "annotation.training_runs"], related_name="tasks"
)
