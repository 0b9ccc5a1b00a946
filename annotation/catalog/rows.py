"""Catalog list rows: what a row of the list page shows, formatted once per page (moved out of
``annotation.catalog.selectors``, which re-exports them)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from annotation.inspections.decision_history import expert_tallies
from annotation.inspections.models import CatalogEntry
from annotation.spectra.models import Spectrum

EXPERT_SPLIT = "split"  # experts disagree (services.expert_decision_record)


@dataclass(frozen=True)
class CatalogRowView:
    """One list row with its numbers already formatted: the page shows 50 of these, and
    Django's floatformat (Decimal arithmetic) cost more than the query behind them."""

    detail_url: str
    run_url: str
    object_id: str
    synthetic: bool
    shifted: bool
    survey: str
    ra: str
    dec: str
    task_code: str
    verdict: str
    confidence: str
    snr: str
    policy_name: str
    expert_decision: str
    run_id: int
    model_key: str
    model_label: str
    vetted_label: str
    label_state: str
    created: str
    expert_tally: str = ""  # "YES 1 · NO 1" when the experts disagree
    designation: str = ""
    dataset: str = ""
    spectrum_url: str = ""
    spectrum_id: int | None = None
    duplicates: int = 0
    duplicate_of: str = ""  # "also in lamost (spectrum 12), uploads (spectrum 40)"
    expert_quality: str = ""  # the experts' mean 0-4 quality, "" when none gave one
    expert_issues: str = ""  # "sky, low_snr"
    content_hash: str = ""
    evidence: str = ""  # the evidence ablation's outcome; "" when not tested


def _duplicate_notes(entries: list[CatalogEntry]) -> dict[str, list[tuple[int, str]]]:
    """The stored spectra of each duplicated content on the page: one query per page."""
    hashes = {e.content_hash for e in entries if getattr(e, "duplicates", 0) and e.content_hash}
    found: dict[str, list[tuple[int, str]]] = {}
    if hashes:
        rows = Spectrum.objects.filter(content_hash__in=hashes).order_by("pk")
        for pk, content_hash, dataset in rows.values_list("pk", "content_hash", "dataset"):
            found.setdefault(content_hash, []).append((pk, dataset))
    return found


def _also_in(entry: CatalogEntry, notes: dict[str, list[tuple[int, str]]]) -> str:
    others = [(pk, ds) for pk, ds in notes.get(entry.content_hash, []) if pk != entry.spectrum_id]
    return ", ".join(f"{dataset} (spectrum {pk})" for pk, dataset in others[:10])


def _fixed(value: float | None, decimals: int) -> str:
    return "" if value is None else f"{value:.{decimals}f}"


def list_rows(
    entries: Iterable[CatalogEntry],
    *,
    detail_prefix: str,
    list_url: str,
    spectrum_prefix: str = "/spectra/",
) -> list[CatalogRowView]:
    """Rows for the list page; ``detail_prefix`` is the detail URL without the id."""
    from django.utils import timezone

    entries = list(entries)
    split = [
        e.candidate_id
        for e in entries
        if e.expert_decision == EXPERT_SPLIT and e.candidate_id is not None
    ]
    tallies = expert_tallies(split)
    notes = _duplicate_notes(entries)
    return [
        CatalogRowView(
            detail_url=f"{detail_prefix}{entry.pk}/",
            run_url=f"{list_url}?run={entry.run_id}",
            object_id=entry.object_id,
            synthetic=entry.synthetic,
            shifted=entry.shifted,
            survey=entry.survey,
            ra=_fixed(entry.ra, 5),
            dec=_fixed(entry.dec, 5),
            task_code=entry.task_code,
            verdict=entry.verdict,
            confidence=_fixed(entry.confidence, 3),
            snr=_fixed(entry.snr, 1),
            policy_name=entry.policy_name,
            expert_decision=entry.expert_decision,
            run_id=entry.run_id,
            model_key=entry.model_key,
            model_label=entry.model_label,
            vetted_label=entry.vetted_label,
            label_state=entry.label_state,
            created=timezone.localtime(entry.created_at).strftime("%Y-%m-%d %H:%M")
            if entry.created_at
            else "",
            expert_tally=tallies.get(entry.candidate_id, "")
            if entry.candidate_id is not None
            else "",
            designation=entry.designation,
            dataset=entry.dataset,
            spectrum_id=entry.spectrum_id,
            spectrum_url=f"{spectrum_prefix}{entry.spectrum_id}/" if entry.spectrum_id else "",
            duplicates=int(getattr(entry, "duplicates", 0) or 0),
            duplicate_of=_also_in(entry, notes),
            expert_quality=_fixed(entry.expert_quality, 1),
            expert_issues=entry.expert_issues.replace(",", ", "),
            content_hash=entry.content_hash,
            evidence=entry.evidence_outcome,
        )
        for entry in entries
    ]
