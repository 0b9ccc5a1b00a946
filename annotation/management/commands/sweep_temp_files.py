"""Remove what killed processes left in SPECVET_TEMP_DIR (for cron; workers do it at start)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from annotation.core.tempfiles import sweep_stale_temp_files


class Command(BaseCommand):
    help = __doc__

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--older-than-hours",
            type=float,
            default=None,
            help=f"default SPECVET_TEMP_MAX_AGE_HOURS ({settings.SPECVET_TEMP_MAX_AGE_HOURS})",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        hours = options["older_than_hours"]
        if hours is not None and hours < 1:
            raise CommandError(
                f"--older-than-hours {hours} is under 1 hour: an upload or export still running "
                "could lose its files"
            )
        swept = sweep_stale_temp_files(older_than_s=None if hours is None else hours * 3600)
        self.stdout.write(
            f"{settings.SPECVET_TEMP_DIR}: removed {swept.removed} stale entries "
            f"({swept.freed_bytes} bytes), kept {swept.kept}"
        )
