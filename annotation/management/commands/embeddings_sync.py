"""Write the missing and stale "find more like this" embeddings (annotation.spectra.embeddings):
spectra stored before embeddings existed, or embedded with another basis (after
``python -m agent.similarity fit``) or in another rest frame."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from annotation.spectra import embeddings, neighbour_index


class Command(BaseCommand):
    help = __doc__

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--limit", type=int, default=None, help="at most this many")
        parser.add_argument(
            "--index",
            action="store_true",
            help="then build the neighbour index (saved when SPECVET_NEIGHBOUR_INDEX is set)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        limit = options["limit"]
        if limit is not None and limit < 1:
            raise CommandError(f"--limit must be at least 1, got {limit}")
        basis = embeddings.current_basis()
        done = embeddings.embeddings_sync(limit=limit)
        self.stdout.write(f"{done} embeddings written with basis {basis.id} ({basis.name})")
        if options["index"]:
            size = neighbour_index.rebuild()
            where = neighbour_index.saved_path()
            self.stdout.write(
                f"neighbour index: {size} vectors" + (f", saved to {where}" if where else "")
            )
