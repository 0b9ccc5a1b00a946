"""Writes on tasks and spectra: seeding tasks, loading and labelling spectra, uploads."""

from __future__ import annotations

import hashlib
import json
import math
import re
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from django.conf import settings
from django.contrib.auth.models import User
from django.core.files.uploadedfile import UploadedFile
from django.db import IntegrityError, transaction
from django.utils import timezone

from agent import inspection_tasks as agent_tasks
from agent.redshift_fit import class_disagreement
from agent.resolution import Resolution
from agent.spectra import Declared, SpectrumFormatError, load_spectra, spectrum_to_npz_bytes
from agent.spectra import Spectrum as SpectrumValue
from agent.splits import content_hash
from annotation.core.errors import NotAllowed, UploadRejected, WorkflowError, WrongState
from annotation.core.services import audit_log_record
from annotation.core.tempfiles import temp_dir
from annotation.spectra import embeddings
from annotation.spectra.labels import DecisionRecord, LabelState, label_from_decisions
from annotation.spectra.models import (
    LabelExport,
    RedshiftDecision,
    RedshiftSource,
    Spectrum,
    SpectrumLabel,
    Task,
)
from annotation.spectra.uploads import read_limits

# --- tasks -----------------------------------------------------------------------------------


@transaction.atomic
def tasks_seed_builtin() -> list[Task]:
    """Create or refresh the built-in tasks from agent/data/tasks.json."""
    rows = []
    for value in agent_tasks.all_tasks():
        data = agent_tasks.task_to_dict(value)
        row, _ = Task.objects.update_or_create(
            code=value.code,
            defaults={
                "name": data["name"],
                "question": data["question"],
                "guideline": data["guideline"],
                "windows": data["windows"],
                "contaminants": data["contaminants"],
                "builtin": True,
            },
        )
        rows.append(row)
    return rows


# --- spectra ---------------------------------------------------------------------------------


def spectrum_content_hash(value: SpectrumValue) -> str:
    """SHA-256 of the arrays (agent.splits.content_hash: the key splits are kept apart by)."""
    return content_hash(value)


@dataclass(frozen=True)
class ImportResult:
    created: list[Spectrum]
    duplicates: int


def _spectrum_row(
    value: SpectrumValue,
    *,
    dataset: str,
    source_name: str,
    uploaded_by: User | None,
    task: Task | None,
    label: str,
    split: str,
    synthetic: bool,
) -> Spectrum:
    good = value.good
    finite_wave = value.wavelength[good] if good.any() else value.wavelength
    resolution = value.resolution
    return Spectrum(
        object_id=value.object_id[:120] or source_name[:120],
        survey=value.survey[:40],
        ra=value.ra,
        dec=value.dec,
        snr=value.snr if value.snr is not None and np.isfinite(value.snr) else None,
        redshift=float(value.redshift),
        n_pixels=len(value),
        wavelength_min=float(finite_wave[0]),
        wavelength_max=float(finite_wave[-1]),
        arrays=spectrum_to_npz_bytes(value),
        content_hash=spectrum_content_hash(value),
        meta=value.meta,
        source_name=source_name[:255],
        resolution_r=None if resolution is None else resolution.resolving_power_at(6000.0),
        resolution_source="" if resolution is None else resolution.source,
        dataset=dataset,
        split=split,
        task=task,
        label=label,
        synthetic=synthetic or bool(value.meta.get("synthetic")),
        uploaded_by=uploaded_by
        if uploaded_by is not None and uploaded_by.is_authenticated
        else None,
    )


@transaction.atomic
def spectra_store(
    *,
    values: Iterable[SpectrumValue],
    dataset: str,
    source_name: str,
    uploaded_by: User | None = None,
    task: Task | None = None,
    label: str = "",
    split: str = "",
    synthetic: bool = False,
) -> ImportResult:
    """Store already-validated spectra; one already in the dataset (same arrays) is skipped."""
    created: list[Spectrum] = []
    duplicates = 0
    for value in values:
        row = _spectrum_row(
            value,
            dataset=dataset,
            source_name=source_name,
            uploaded_by=uploaded_by,
            task=task,
            label=label,
            split=split,
            synthetic=synthetic,
        )
        if Spectrum.objects.filter(dataset=dataset, content_hash=row.content_hash).exists():
            duplicates += 1
            continue
        try:
            with transaction.atomic():
                row.save()
        except IntegrityError:
            duplicates += 1  # a concurrent import stored the same spectrum first
            continue
        created.append(row)
    # kept in step with the spectra: "find more like this" searches these (spectra.embeddings)
    embeddings.spectra_embed(spectra=created)
    if created:
        audit_log_record(
            actor=uploaded_by,
            action="spectra_imported",
            obj=created[0],
            comment=f"{len(created)} spectra from {source_name} into {dataset}",
            data={"ids": [row.pk for row in created], "duplicates": duplicates},
        )
    return ImportResult(created=created, duplicates=duplicates)


def spectra_import_path(
    *,
    path: Path,
    dataset: str = "uploads",
    uploaded_by: User | None = None,
    task: Task | None = None,
    label: str = "",
    split: str = "",
    synthetic: bool = False,
) -> ImportResult:
    """Read a survey file (format detected from its content) and store every spectrum in it.

    Raises SpectrumFormatError, naming the file and the reason, before anything is stored.
    """
    values = load_spectra(path, limits=read_limits())
    return spectra_store(
        values=values,
        dataset=dataset,
        source_name=Path(path).name,
        uploaded_by=uploaded_by,
        task=task,
        label=label,
        split=split,
        synthetic=synthetic,
    )


_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")


def safe_file_name(name: str) -> str:
    cleaned = _UNSAFE_NAME.sub("_", Path(name).name).strip("._")
    return (cleaned or "upload")[:120]


def spectra_import_uploads(
    *,
    files: list[UploadedFile],
    uploaded_by: User,
    dataset: str = "uploads",
    task: Task | None = None,
    label: str = "",
    resolution: Resolution | None = None,
    declared: Declared | None = None,
) -> ImportResult:
    """Import uploaded files all-or-nothing: one bad file and nothing is stored.

    ``resolution`` (source "user") replaces what the files or survey defaults say, for every
    spectrum of the upload; ``declared`` (columns of a text table, wavelength frame) says what
    the files may not."""
    if not files:
        raise UploadRejected("no file was uploaded")
    if len(files) > settings.SPECTRUM_UPLOAD_MAX_FILES:
        raise UploadRejected(
            f"{len(files)} files uploaded; at most {settings.SPECTRUM_UPLOAD_MAX_FILES} at once"
        )
    for upload in files:
        if upload.size is not None and upload.size > settings.SPECTRUM_UPLOAD_MAX_BYTES:
            raise UploadRejected(
                f"{safe_file_name(upload.name or '')}: {upload.size} bytes is over the limit of "
                f"{settings.SPECTRUM_UPLOAD_MAX_BYTES} bytes"
            )
    parsed: list[tuple[str, list[SpectrumValue]]] = []
    with tempfile.TemporaryDirectory(prefix="specvet-upload-", dir=temp_dir()) as tmp:
        for number, upload in enumerate(files):
            name = safe_file_name(upload.name or f"upload-{number}")
            # A per-file folder keeps the user's file name, so errors name what they uploaded.
            target = Path(tmp) / str(number) / name
            target.parent.mkdir()
            with target.open("wb") as handle:
                for chunk in upload.chunks():
                    handle.write(chunk)
            try:
                parsed.append((name, load_spectra(target, limits=read_limits(), declared=declared)))
            except SpectrumFormatError as error:
                raise SpectrumFormatError(str(error).replace(str(target), name)) from None
    created: list[Spectrum] = []
    duplicates = 0
    with transaction.atomic():
        for name, values in parsed:
            if resolution is not None:
                for value in values:
                    value.resolution = resolution
            result = spectra_store(
                values=values,
                dataset=dataset,
                source_name=name,
                uploaded_by=uploaded_by,
                task=task,
                label=label,
            )
            created.extend(result.created)
            duplicates += result.duplicates
    return ImportResult(created=created, duplicates=duplicates)


# --- vetted labels ---------------------------------------------------------------------------


@transaction.atomic
def spectrum_label_apply(
    *, spectrum_id: int, task_id: int, records: list[DecisionRecord], actor: User | None
) -> SpectrumLabel:
    """Store the label the rule (``annotation.spectra.labels``) gives ``records``, every expert
    decision on the spectrum for the task; a change of state or value goes to the audit log."""
    outcome = label_from_decisions(records)
    row = SpectrumLabel.objects.select_for_update().filter(
        spectrum_id=spectrum_id, task_id=task_id
    ).first() or SpectrumLabel(spectrum_id=spectrum_id, task_id=task_id, state="")
    before = (row.state, row.value)
    row.state, row.value = outcome.state, outcome.value
    row.decisions = [record.as_dict() for record in outcome.decisions]
    if outcome.value and before != (row.state, row.value):
        row.labelled_at = timezone.now()
    elif not outcome.value:
        row.labelled_at = None
    row.save()
    if before != (row.state, row.value):
        audit_log_record(
            actor=actor,
            action="spectrum_label",
            obj=row,
            from_state=f"{before[0]} {before[1]}".strip(),
            to_state=f"{row.state} {row.value}".strip(),
            comment=f"task {row.task_id}, spectrum {spectrum_id}",
            data={
                "counted": [r.decision_id for r in outcome.decisions if r.counted],
                "decisions": [r.decision_id for r in outcome.decisions],
            },
        )
    return row


LABEL_EXPORT_MAX_ROWS = 100_000


def _label_export_rows(task_codes: list[str]) -> list[dict[str, Any]]:
    rows = (
        SpectrumLabel.objects.filter(state__in=LabelState.LABELLED)
        .exclude(value="")
        .select_related("task", "spectrum")
        .order_by("task__code", "spectrum_id")
    )
    if task_codes:
        rows = rows.filter(task__code__in=task_codes)
    count = rows.count()
    if count > LABEL_EXPORT_MAX_ROWS:
        raise WorkflowError(
            f"{count} vetted labels match; an export holds at most {LABEL_EXPORT_MAX_ROWS}: "
            "choose fewer tasks"
        )
    return [
        {
            "label_id": row.pk,
            "spectrum_id": row.spectrum_id,
            "object_id": row.spectrum.object_id,
            "survey": row.spectrum.survey,
            "content_hash": row.spectrum.content_hash,
            "task": row.task.code,
            "label": row.value,
            "state": row.state,
            "decisions": sorted(d["decision_id"] for d in row.decisions if d.get("counted")),
        }
        for row in rows
    ]


def _label_export_run_ids(rows: list[dict[str, Any]]) -> set[int]:
    """The runs whose verdicts the experts behind these rows' labels saw."""
    labels = SpectrumLabel.objects.filter(pk__in=[row["label_id"] for row in rows])
    return {
        decision["run_id"]
        for decisions in labels.values_list("decisions", flat=True)
        for decision in decisions
        if decision.get("counted") and decision.get("run_id") is not None
    }


@transaction.atomic
def label_export_create(
    *,
    actor: User | None,
    task_codes: list[str] | None = None,
    hidden_runs: frozenset[int] = frozenset(),
    hidden_hashes: frozenset[str] = frozenset(),
) -> LabelExport:
    """Export the vetted labels (optionally of some tasks) as the next version, or return the
    latest when its content is the same. Each row names the decisions its label rests on.
    ``hidden_*``: what the actor may not read (annotation/blinding.py); an export that holds
    any of it is refused to them."""
    codes = sorted(set(task_codes or []))
    unknown = sorted(
        set(codes) - set(Task.objects.filter(code__in=codes).values_list("code", flat=True))
    )
    if unknown:
        raise WorkflowError(f"unknown task codes: {', '.join(unknown)}")
    rows = _label_export_rows(codes)
    if not rows:
        raise WrongState("there is no vetted label to export yet: two experts who agree make one")
    run_ids = _label_export_run_ids(rows)
    if hidden_runs & run_ids or hidden_hashes & {row["content_hash"] for row in rows}:
        raise NotAllowed(
            "you rate an open campaign showing these spectra or the runs their experts vetted; "
            "an export would show you their labels: export after the campaign closes, or ask "
            "an ML engineer who does not rate it"
        )
    body = json.dumps(rows, sort_keys=True, separators=(",", ":")).encode()
    content_hash = hashlib.sha256(body).hexdigest()
    latest = LabelExport.objects.select_for_update().order_by("-version").first()
    if latest is not None and latest.content_hash == content_hash:
        return latest
    counts: dict[str, dict[str, int]] = {}
    for row in rows:
        per_task = counts.setdefault(row["task"], {"YES": 0, "NO": 0})
        per_task[row["label"]] += 1
    version = (latest.version if latest else 0) + 1
    decisions = sorted({d for row in rows for d in row["decisions"]})
    manifest: dict[str, Any] = {
        "name": "specvet vetted labels (GRPO rows)",
        "version": version,
        "rows": len(rows),
        "counts": counts,
        "task_filter": codes,
        "decisions": decisions,
        "run_ids": sorted(run_ids),  # the runs whose verdicts the experts saw (blinding)
        "content_hash": content_hash,
        "rule": "two agreeing experts, or a third expert settling a conflict; unsure never counts",
    }
    export = LabelExport.objects.create(
        version=version,
        content_hash=content_hash,
        manifest=manifest,
        rows=rows,
        created_by=actor if actor is not None and actor.is_authenticated else None,
    )
    audit_log_record(
        actor=actor,
        action="label_export_created",
        obj=export,
        comment=f"version {version}: {len(rows)} labels",
        data={"content_hash": content_hash, "decisions": len(decisions)},
    )
    return export


# --- redshifts the experts accept or type ----------------------------------------------------------

REDSHIFT_BOUNDS = (-0.01, 10.0)  # selectors.VIEWER_LIMITS: 1 + z is a stretch factor


class RedshiftNeedsConfirmation(WrongState):
    """The redshift contradicts the fit's class; stored only when the expert confirms it."""


def redshift_range_error(z: float) -> str:
    """Why ``z`` cannot be a vetted redshift (empty when it can)."""
    if not math.isfinite(z):
        return f"z must be a finite number, got {z}"
    low, high = REDSHIFT_BOUNDS
    if not low <= z <= high:
        return f"z = {z:g} is out of range: a redshift here lies between {low:g} and {high:g}"
    return ""


@transaction.atomic
def spectrum_redshift_decide(
    *,
    spectrum: Spectrum,
    actor: User,
    z: float,
    source: str,
    z_err: float | None = None,
    template: str = "",
    rank: int | None = None,
    r_value: float | None = None,
    kind: str = "",
    fit_class: str = "",
    class_delta_chi2: float | None = None,
    quality: int | None = None,
    confirmed: bool = False,
) -> RedshiftDecision:
    """Record an expert's redshift for ``spectrum``: a fit alternative accepted (``source`` fit,
    with its template, its ``kind`` and rank) or a typed value (override). A redshift that
    contradicts the fit's class (``fit_class``: a star's |z| is at most 0.01; an alternative of
    another class) is refused unless ``confirmed``. The previous vetted redshift (or the
    file's), the new one and the fit's class go to the audit log."""
    if source not in RedshiftSource.values:
        raise WorkflowError(f"unknown redshift source {source!r}")
    if error := redshift_range_error(z):
        raise WorkflowError(error)
    if z_err is not None and not (z_err >= 0):
        raise WorkflowError(f"the redshift error must be zero or more, got {z_err}")
    margin = math.inf if class_delta_chi2 is None else class_delta_chi2
    disagreement = class_disagreement(fit_class, margin, z, kind)
    if disagreement and not confirmed:
        raise RedshiftNeedsConfirmation(f"{disagreement}: confirm to store it anyway")
    previous = spectrum.redshift_decisions.order_by("-decided_at", "-id").first()
    decision = RedshiftDecision.objects.create(
        spectrum=spectrum,
        z=z,
        z_err=z_err,
        source=source,
        template=template[:200],
        rank=rank,
        r_value=r_value,
        decided_by=actor,
    )
    embeddings.spectrum_embedding_refresh(spectrum=spectrum)  # a new rest frame
    audit_log_record(
        actor=actor,
        action="spectrum_redshift",
        obj=spectrum,
        from_state=f"z={previous.z:.6f}" if previous else f"z={spectrum.redshift:.6f} (file)",
        to_state=f"z={z:.6f}",
        comment=f"{source}"
        + (f": alternative {rank}, {template}" if rank else "")
        + (f"; confirmed against the fit: {disagreement}" if disagreement else ""),
        data={
            "decision": decision.pk,
            "z_err": z_err,
            "template": template,
            "rank": rank,
            "fit_class": fit_class,
            "class_delta_chi2": class_delta_chi2,
            "quality": quality,
            "confirmed_disagreement": disagreement,
        },
    )
    return decision


@transaction.atomic
def spectrum_redshift_undo(*, spectrum: Spectrum, actor: User) -> RedshiftDecision | None:
    """Withdraw the spectrum's newest redshift decision, which ``actor`` made: the one before
    it (or none: the file's z) is the vetted redshift again. The withdrawn row is deleted and
    its values kept in the audit log. Locks the spectrum's decisions (select_for_update) so two
    undos cannot withdraw two rows."""
    newest = (
        RedshiftDecision.objects.select_for_update()
        .filter(spectrum=spectrum)
        .order_by("-decided_at", "-id")
        .first()
    )
    if newest is None:
        raise WrongState("this spectrum has no vetted redshift to undo")
    if newest.decided_by_id != actor.pk:
        raise NotAllowed(
            "only the expert who stored the newest redshift may undo it "
            f"(it is {newest.decided_by.username if newest.decided_by else 'nobody'}'s)"
        )
    previous = (
        RedshiftDecision.objects.filter(spectrum=spectrum)
        .exclude(pk=newest.pk)
        .order_by("-decided_at", "-id")
        .first()
    )
    audit_log_record(
        actor=actor,
        action="spectrum_redshift_undone",
        obj=spectrum,
        from_state=f"z={newest.z:.6f}",
        to_state=f"z={previous.z:.6f}" if previous else f"z={spectrum.redshift:.6f} (file)",
        comment=f"withdrew the {newest.get_source_display()} of {newest.decided_at:%Y-%m-%d %H:%M}",
        data={
            "withdrawn": {
                "id": newest.pk,
                "z": newest.z,
                "z_err": newest.z_err,
                "source": newest.source,
                "template": newest.template,
                "rank": newest.rank,
                "decided_at": newest.decided_at.isoformat(),
            }
        },
    )
    newest.delete()
    return previous
