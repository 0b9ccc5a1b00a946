from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from agent.spectra import SpectrumFormatError
from annotation.spectra import services
from annotation.spectra.models import Label, Task


class Command(BaseCommand):
    help = (
        "Load survey files (LAMOST, SDSS, DESI, SpecVI-Bench parquet, CSV/ASCII/NPZ tables; "
        "gzip ok). The format is detected from the content. A bad file stores nothing."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("paths", nargs="+", type=Path)
        parser.add_argument("--dataset", default="uploads")
        parser.add_argument("--task", help="task code the spectra are labelled for, e.g. CV")
        parser.add_argument("--label", choices=Label.values, default="")
        parser.add_argument("--split", default="")

    def handle(self, *args: Any, **options: Any) -> None:
        task = None
        if options["task"]:
            task = Task.objects.filter(code__iexact=options["task"]).first()
            if task is None:
                raise CommandError(f"unknown task {options['task']!r}; run seed_tasks first?")
        failures = 0
        for path in options["paths"]:
            try:
                result = services.spectra_import_path(
                    path=path,
                    dataset=options["dataset"],
                    task=task,
                    label=options["label"],
                    split=options["split"],
                )
            except (SpectrumFormatError, OSError) as error:
                failures += 1
                self.stderr.write(f"skipped: {error}")
                continue
            self.stdout.write(
                f"{path.name}: {len(result.created)} stored, {result.duplicates} duplicates"
            )
        if failures:
            raise CommandError(f"{failures} of {len(options['paths'])} files could not be read")
