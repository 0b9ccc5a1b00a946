"""Gold items stay unrecognisable in the catalog: a vetter with a gold item waiting does not see
that spectrum's vetted label, label state or expert decisions for the task (a labelled spectrum
in the queue can only be gold). Once they answer it, or decide on the spectrum, all shows again.

The entry page, its API twin and the list (page, API) blank those fields in memory; the list's
filters on them leave such entries out, so a filter does not tell either."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.db.models import Q, QuerySet

from annotation.inspections.models import CatalogEntry
from annotation.learning.queue import gold_pending_keys

__all__ = ["gold_pending_keys", "hide_filtered", "labels_hidden", "mask_labels"]


def labels_hidden(entry: CatalogEntry, keys: frozenset[tuple[int, str]]) -> bool:
    return entry.spectrum_id is not None and (entry.spectrum_id, entry.task_code) in keys


def mask_labels(entries: Iterable[CatalogEntry], keys: frozenset[tuple[int, str]]) -> None:
    """Blank, in memory only, what vetting said about the entries of waiting gold spectra."""
    for entry in entries:
        if labels_hidden(entry, keys):
            entry.expert_decision = ""
            entry.vetted_label = ""
            entry.label_state = ""
            entry.expert_quality = None
            entry.expert_issues = ""


def hide_filtered(
    rows: QuerySet[CatalogEntry], filters: Any, keys: frozenset[tuple[int, str]]
) -> QuerySet[CatalogEntry]:
    """``rows`` less the entries of waiting gold spectra when the list filters on vetting."""
    if not keys or not (filters.expert_decision or filters.label_state):
        return rows
    hidden = Q()
    for spectrum_id, code in keys:
        hidden |= Q(spectrum_id=spectrum_id, task_code=code)
    return rows.exclude(hidden)
