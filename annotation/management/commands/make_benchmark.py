from __future__ import annotations

from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser

from agent import synthetic
from annotation.spectra import services
from annotation.spectra.models import Task

DATASET = "specvi-mini"


class Command(BaseCommand):
    help = (
        "Write SpecVI-mini, the synthetic benchmark (LAMOST-layout FITS, manifest, SpecVI-Bench "
        "parquet), reproducibly from a seed; --load also stores it in the database."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--out", type=Path, default=settings.BASE_DIR / "var" / DATASET)
        parser.add_argument("--seed", type=int, default=20260)
        parser.add_argument("--scale", type=float, default=1.0, help="multiply split sizes")
        parser.add_argument("--tasks", default="CV,CS,SS,MG,WD")
        parser.add_argument("--load", action="store_true", help="store the spectra in the database")

    def handle(self, *args: Any, **options: Any) -> None:
        tasks = tuple(code.strip().upper() for code in options["tasks"].split(",") if code.strip())
        manifest_path = synthetic.write_benchmark(
            options["out"],
            seed=options["seed"],
            tasks=tasks,
            sizes=synthetic.default_split_sizes(options["scale"]),
        )
        entries = synthetic.load_manifest(options["out"])
        self.stdout.write(f"wrote {len(entries)} synthetic spectra; manifest {manifest_path}")
        if options["load"]:
            loaded = load_benchmark(options["out"], entries)
            self.stdout.write(f"stored {loaded} new spectra in data set {DATASET!r}")


def load_benchmark(out_dir: Path, entries: list[dict[str, Any]]) -> int:
    services.tasks_seed_builtin()
    tasks = {task.code: task for task in Task.objects.all()}
    stored = 0
    for entry in entries:
        result = services.spectra_import_path(
            path=out_dir / entry["file"],
            dataset=DATASET,
            task=tasks[entry["task"]],
            label=entry["label"],
            split=entry["split"],
            synthetic=True,
        )
        stored += len(result.created)
    return stored
