"""Send again the jobs, training runs and candidates that a killed worker left unfinished.

kombu's filesystem broker (the embedded default with background jobs, ``manage.py serve_demo``)
hands each message over once and has no visibility timeout: a worker stopped outright (SIGKILL,
an out-of-memory kill, a machine that went down) loses the messages it held, and their work would
stay "running" forever. ``serve_demo`` runs this before it starts its worker. Run it by hand only
while no worker is running. Messages still queued get a duplicate, which the leases and claims
make a no-op. Redis and RabbitMQ redeliver by themselves (visibility timeout, acks_late), so this
refuses to run for them.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError


def resend_unfinished_work() -> dict[str, int]:
    from annotation.core.services import unfinished_jobs_resend
    from annotation.inspections.services import unfinished_candidates_resend
    from annotation.training_runs.services import (
        TRAINING_JOB_KIND,
        unfinished_training_runs_resend,
    )

    return {
        "jobs": unfinished_jobs_resend(exclude_kinds=[TRAINING_JOB_KIND]),
        "training runs": unfinished_training_runs_resend(),
        "candidates": unfinished_candidates_resend(),
    }


class Command(BaseCommand):
    help = "Send again the work a killed worker left unfinished (filesystem broker only)."

    def handle(self, *args: Any, **options: Any) -> None:
        if settings.CELERY_TASK_ALWAYS_EAGER:
            raise CommandError(
                "jobs run in-process here (CELERY_TASK_ALWAYS_EAGER): there is no worker whose "
                "messages could be lost; set SPECVET_BACKGROUND_JOBS=1 for the demo's broker"
            )
        if not str(settings.CELERY_BROKER_URL).startswith("filesystem:"):
            raise CommandError(
                f"the broker {str(settings.CELERY_BROKER_URL).split('://')[0]}:// redelivers a "
                "lost worker's messages by itself; this is for the filesystem broker only"
            )
        resent = resend_unfinished_work()
        if any(resent.values()):
            self.stdout.write(
                "sent again what an earlier worker left unfinished: "
                + ", ".join(f"{count} {what}" for what, count in resent.items() if count)
            )
