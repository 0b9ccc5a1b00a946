"""SFT rows from expert-revised trajectories (issue 25, training data from the loop).

A curation counts once an expert's revision of its draft passed audit (approved, standardized,
in vote or accepted; a rejected one does not): its row is the latest revision, the expert's own
text (not the standardizer's rewrite), in the archive format of the accepted-trajectory export
(TRL jsonl, ShareGPT json and the PNGs), so an SFT run trains on it as on that export. Each row
names the draft it corrected, the revision, its author and the approving audits.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth.models import User
from django.db import transaction

from annotation.core.errors import NotAllowed, WorkflowError
from annotation.curation.datasets import SFTEntry, export_save, sft_files
from annotation.curation.models import (
    AuditVerdict,
    Curation,
    CurationState,
    DatasetExport,
    ExportKind,
    TrajectoryVersion,
    VersionKind,
)

# The states a curation reaches only after both auditors approved a revision.
REVIEWED_STATES = (
    CurationState.APPROVED,
    CurationState.STANDARDIZED,
    CurationState.IN_VOTE,
    CurationState.ACCEPTED,
)
ORIGINAL_KINDS = (VersionKind.DRAFT, VersionKind.IMPORT)


@dataclass(frozen=True)
class ExpertRevision:
    """A curation's original (the drafted or imported trajectory) and the expert's revision."""

    curation: Curation
    original: TrajectoryVersion
    revision: TrajectoryVersion
    audits: list[int]  # the approving audits of the revision

    def provenance(self) -> dict[str, object]:
        return {
            "curation_id": self.curation.pk,
            "original_version": self.original.number,
            "original_kind": self.original.kind,
            "revision_version": self.revision.number,
            "revised_by": self.revision.author_id,
            "audits": self.audits,
        }


def expert_revisions(*, task: str = "") -> list[ExpertRevision]:
    """Every reviewed curation with its original and its latest revision, by curation id."""
    rows = (
        Curation.objects.filter(
            state__in=REVIEWED_STATES, planted=False, versions__kind=VersionKind.REVISION
        )
        .select_related("task", "spectrum")
        .distinct()
        .order_by("id")
    )
    if task:
        rows = rows.filter(task__code__iexact=task)
    found = []
    for curation in rows:
        versions = list(curation.versions.order_by("number"))
        revisions = [v for v in versions if v.kind == VersionKind.REVISION]
        if not revisions:
            continue
        revision = revisions[-1]
        # The trajectory the expert corrected: the last draft or import before the revision.
        originals = [v for v in versions if v.kind in ORIGINAL_KINDS and v.number < revision.number]
        if not originals:
            continue
        audits = curation.audits.filter(
            version_number=revision.number, verdict=AuditVerdict.APPROVE
        ).order_by("id")
        found.append(
            ExpertRevision(
                curation=curation,
                original=originals[-1],
                revision=revision,
                audits=list(audits.values_list("pk", flat=True)),
            )
        )
    return found


@transaction.atomic
def revised_export_create(
    *,
    actor: User | None,
    task: str = "",
    hidden_curations: frozenset[int] = frozenset(),
    hidden_hashes: frozenset[str] = frozenset(),
) -> DatasetExport:
    """Export the expert-revised trajectories as the next version of their SFT data set (or the
    latest, if equal). ``hidden_*``: what the actor may not read (annotation/blinding.py); an
    export holding any of it is refused to them, as the accepted-trajectory export is."""
    revisions = expert_revisions(task=task)
    if not revisions:
        raise WorkflowError("no expert-revised trajectory has passed audit yet")
    curations = {item.curation.pk for item in revisions}
    hashes = {item.curation.spectrum.content_hash for item in revisions}
    if hidden_curations & curations or hidden_hashes & hashes:
        raise NotAllowed(
            "you rate an open campaign showing these trajectories or their spectra; an export "
            "would show you their sources: export after the campaign closes, or ask an ML "
            "engineer who does not rate it"
        )
    files, body = sft_files(
        (SFTEntry(item.curation, item.revision, item.provenance()) for item in revisions),
        name="specvet expert-revised SFT dataset",
    )
    body["rows"] = body["n_trajectories"]
    body["decisions"] = {
        "revisions": [[item.curation.pk, item.revision.number] for item in revisions],
        "audits": sorted(pk for item in revisions for pk in item.audits),
    }
    body["rule"] = (
        "the latest expert revision of each curation whose revision passed audit (approved, "
        "standardized, in vote or accepted)"
    )
    return export_save(
        kind=ExportKind.REVISED,
        files=files,
        body=body,
        actor=actor,
        curation_ids=curations,
        content_hashes=hashes,
        task=task,
    )
