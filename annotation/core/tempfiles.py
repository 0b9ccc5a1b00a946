"""The project's own temporary folder, and the sweep of what a killed process left in it.

Uploads (Django's temporary upload files), upload parsing, curation imports and exports all
write under ``settings.SPECVET_TEMP_DIR`` and delete what they wrote when they finish, fail or
are refused. A process killed outright (SIGKILL, an out-of-memory kill, a power cut) deletes
nothing; ``sweep_stale_temp_files`` removes whatever in that folder is older than any live
request or job could be, and runs when a Celery worker or ``serve_demo`` starts, and from
``manage.py sweep_temp_files`` (for cron).
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings


def temp_dir() -> str:
    """``SPECVET_TEMP_DIR``, created if missing (for ``tempfile``'s ``dir=``)."""
    path = Path(settings.SPECVET_TEMP_DIR)
    path.mkdir(parents=True, exist_ok=True)
    return str(path)


@dataclass(frozen=True)
class Sweep:
    removed: int
    freed_bytes: int
    kept: int


def _size(path: Path) -> int:
    if path.is_dir() and not path.is_symlink():
        return sum(p.lstat().st_size for p in path.rglob("*") if not p.is_dir())
    return path.lstat().st_size


def sweep_stale_temp_files(*, older_than_s: float | None = None, now: float | None = None) -> Sweep:
    """Remove the entries of SPECVET_TEMP_DIR last modified more than ``older_than_s`` ago
    (default SPECVET_TEMP_MAX_AGE_HOURS): only that folder, never a link's target."""
    root = Path(temp_dir())
    age = settings.SPECVET_TEMP_MAX_AGE_HOURS * 3600.0 if older_than_s is None else older_than_s
    cutoff = (time.time() if now is None else now) - age
    removed = freed = kept = 0
    for entry in root.iterdir():
        try:
            stat = entry.lstat()
            # a folder's own mtime changes only when entries are added or removed: look inside
            newest = max(
                [stat.st_mtime]
                + (
                    [p.lstat().st_mtime for p in entry.rglob("*")]
                    if entry.is_dir() and not entry.is_symlink()
                    else []
                )
            )
            if newest >= cutoff:
                kept += 1
                continue
            size = _size(entry)
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        except FileNotFoundError:  # its owner finished and removed it meanwhile
            continue
        removed += 1
        freed += size
    return Sweep(removed=removed, freed_bytes=freed, kept=kept)
