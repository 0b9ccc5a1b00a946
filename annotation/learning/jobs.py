"""The recalibration job's runner (registered in AppConfig.ready): refit, then re-route."""

from __future__ import annotations

from typing import Any

from annotation.core.jobs import runner
from annotation.core.models import Job
from annotation.learning import services
from annotation.spectra.models import Task


@runner(services.JOB_KIND)
def run_recalibration(job: Job) -> dict[str, Any]:
    task = Task.objects.get(code=job.params["task"])
    return {
        "task": task.code,
        "models": services.recalibrate_task(
            task=task, model_key=job.params.get("model_key", ""), actor=job.created_by, job=job
        ),
    }
