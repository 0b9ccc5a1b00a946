"""Re-run an inspection run's finished candidates in-process and compare with what was stored.

    manage.py reproduce --run 12               # every finished candidate
    manage.py reproduce --run 12 --sample 50   # 50 spread over the run
    manage.py reproduce --run 12 --candidate 301 --candidate 302 --json

Exits with status 1 when any candidate does not reproduce (its differences are printed), so a
script or CI can rely on it. Writes nothing: the run's background re-check record is kept by the
workers (``INSPECTION_RECHECK_RATE``).
"""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser


class Command(BaseCommand):
    help = "Re-run a run's finished candidates in-process and compare with what was stored."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--run", type=int, required=True, help="inspection run id")
        parser.add_argument(
            "--sample", type=int, default=None, help="how many finished candidates (default all)"
        )
        parser.add_argument(
            "--candidate", type=int, action="append", default=None, help="a candidate id"
        )
        parser.add_argument("--json", action="store_true", help="one JSON object on stdout")

    def handle(self, *args: Any, **options: Any) -> None:
        from annotation.inspections.models import InspectionRun
        from annotation.inspections.reproduction import run_reproduce
        from annotation.inspections.run_policies import deterministic

        sample = options["sample"]
        if sample is not None and sample < 1:
            raise CommandError(f"--sample must be at least 1, got {sample}")
        run = InspectionRun.objects.select_related("task").filter(pk=options["run"]).first()
        if run is None:
            raise CommandError(f"there is no inspection run {options['run']}")
        exact, why_not = deterministic(run)
        reproductions = run_reproduce(run, candidate_ids=options["candidate"], sample=sample)
        checked = [r for r in reproductions if r.checked]
        mismatched = [r for r in checked if not r.matches]
        summary = {
            "run": run.pk,
            "task": run.task.code,
            "policy": run.policy_spec.get("kind"),
            "deterministic": exact,
            "checked": len(checked),
            "matched": len(checked) - len(mismatched),
            "mismatched": len(mismatched),
            "seconds": round(sum(r.seconds for r in reproductions), 3),
            "mismatches": [r.as_dict() for r in mismatched],
            "notes": sorted({note for r in reproductions for note in r.notes}),
        }
        if options["json"]:
            self.stdout.write(json.dumps(summary))
        else:
            self.stdout.write(
                f"run {run.pk} ({run.task.code}, {summary['policy']}): {summary['checked']} "
                f"candidates re-run in-process, {summary['matched']} reproduce, "
                f"{summary['mismatched']} do not ({summary['seconds']} s)"
            )
            if not exact:
                self.stdout.write(f"note: {why_not}")
            for note in summary["notes"]:
                self.stdout.write(f"note: {note}")
            for reproduction in mismatched:
                self.stdout.write(f"candidate {reproduction.candidate_id}:")
                for difference in reproduction.differences:
                    self.stdout.write(
                        f"  {difference.where}: stored {difference.stored}, "
                        f"reproduced {difference.reproduced}"
                    )
        if mismatched:
            raise SystemExit(1)
