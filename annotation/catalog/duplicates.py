"""Duplicate groups: the stored spectra that hold the same content (same SHA-256), with their
data sets and the catalog entries made from them. Spectra and catalog rows already carry the
hash (migration 0020), indexed, so a group is two index lookups."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from django.db.models import Count, QuerySet

from annotation.inspections.models import CatalogEntry
from annotation.spectra.models import Spectrum

GROUPS_PAGE_SIZE = 50
MAX_MEMBERS = 500
_SHA256 = re.compile(r"[0-9a-f]{64}")


def is_content_hash(value: str) -> bool:
    return bool(_SHA256.fullmatch(value))


@dataclass(frozen=True)
class DuplicateGroup:
    content_hash: str
    spectra: list[Spectrum]  # oldest first, at most MAX_MEMBERS
    entries: list[CatalogEntry]  # the catalog entries of those spectra the reader may see


def duplicate_group(content_hash: str, *, entries: QuerySet[CatalogEntry]) -> DuplicateGroup:
    """The group of ``content_hash``; ``entries`` is what the reader may see of the catalog."""
    spectra = list(
        Spectrum.objects.filter(content_hash=content_hash)
        .only("object_id", "survey", "dataset", "ra", "dec", "snr", "created_at", "content_hash")
        .order_by("pk")[:MAX_MEMBERS]
    )
    rows = (
        entries.filter(content_hash=content_hash)
        .only(
            "object_id",
            "dataset",
            "spectrum_id",
            "task_code",
            "verdict",
            "confidence",
            "expert_decision",
            "expert_quality",
            "vetted_label",
            "label_state",
            "run_id",
        )  # fmt: skip
        .order_by("spectrum_id", "task_code", "-id")[:MAX_MEMBERS]
    )
    return DuplicateGroup(content_hash=content_hash, spectra=spectra, entries=list(rows))


def duplicate_groups(page: int) -> tuple[list[dict[str, Any]], bool]:
    """One page of content hashes held by two or more spectra (largest groups first among
    equals by hash), and whether another page follows. No total: it would scan every row."""
    offset = (page - 1) * GROUPS_PAGE_SIZE
    rows = list(
        Spectrum.objects.exclude(content_hash="")
        .order_by()
        .values("content_hash")
        .annotate(members=Count("pk"))
        .filter(members__gt=1)
        .order_by("content_hash")[offset : offset + GROUPS_PAGE_SIZE + 1]
    )
    more = len(rows) > GROUPS_PAGE_SIZE
    rows = rows[:GROUPS_PAGE_SIZE]
    datasets: dict[str, list[str]] = {}
    names: dict[str, str] = {}
    hashes = [row["content_hash"] for row in rows]
    for content_hash, dataset, object_id in (
        Spectrum.objects.filter(content_hash__in=hashes)
        .order_by("pk")
        .values_list("content_hash", "dataset", "object_id")
    ):
        datasets.setdefault(content_hash, []).append(dataset)
        names.setdefault(content_hash, object_id)
    groups = [
        {
            "content_hash": row["content_hash"],
            "members": row["members"],
            "object_id": names.get(row["content_hash"], ""),
            "datasets": sorted(set(datasets.get(row["content_hash"], []))),
        }
        for row in rows
    ]
    return groups, more
