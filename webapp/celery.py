"""The Celery app. Embedded default: tasks run in-process (CELERY_TASK_ALWAYS_EAGER).

With SPECVET_BACKGROUND_JOBS=1 and no CELERY_BROKER_URL, tasks go through kombu's filesystem
broker (webapp/settings.py); its folders are created here, by whichever process starts first.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from celery import Celery
from celery.signals import worker_ready
from django.conf import settings

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")

logger = logging.getLogger(__name__)

app = Celery("specvet")
app.config_from_object("django.conf:settings", namespace="CELERY")
# Each domain that runs background work keeps its Celery tasks in its own tasks module.
app.autodiscover_tasks(
    ["annotation.core", "annotation.inspections", "annotation.training_runs"], related_name="tasks"
)

FILESYSTEM_FOLDERS = ("data_folder_in", "data_folder_out", "processed_folder", "control_folder")


def filesystem_broker_folders(conf: Any) -> list[Path]:
    """The filesystem broker's folders (none for any other broker), created if missing."""
    if not str(conf.broker_url or "").startswith("filesystem:"):
        return []
    options = conf.broker_transport_options or {}
    folders = [Path(options[name]) for name in FILESYSTEM_FOLDERS if options.get(name)]
    for folder in folders:
        folder.mkdir(parents=True, exist_ok=True)
    return folders


@app.on_after_configure.connect
def _create_broker_folders(sender: Celery, **_: Any) -> None:
    # Runs once per process when the configuration is first read (web and worker alike), so the
    # first message finds its folder.
    filesystem_broker_folders(sender.conf)


@worker_ready.connect
def _sweep_temp_files(**_: Any) -> None:
    # What a killed worker or web process left in SPECVET_TEMP_DIR (annotation/core/tempfiles.py).
    from annotation.core.tempfiles import sweep_stale_temp_files

    swept = sweep_stale_temp_files()
    if swept.removed:
        logger.info(
            "removed %d stale temporary entries (%d bytes) from %s",
            swept.removed,
            swept.freed_bytes,
            settings.SPECVET_TEMP_DIR,
        )
