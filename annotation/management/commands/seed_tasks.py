from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from annotation.spectra import services


class Command(BaseCommand):
    help = "Create or refresh the built-in inspection tasks from agent/data/tasks.json."

    def handle(self, *args: Any, **options: Any) -> None:
        rows = services.tasks_seed_builtin()
        self.stdout.write(f"{len(rows)} built-in tasks: {', '.join(r.code for r in rows)}")
