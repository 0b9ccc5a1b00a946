"""Curation imports (ShareGPT / SpecVI files) and dataset exports for training."""

from __future__ import annotations

import hashlib
import io
import json
import tempfile
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.contrib.auth.models import User
from django.core.files.base import ContentFile
from django.db import transaction

from agent.trajectory import Trajectory
from annotation.core.errors import NotAllowed, WorkflowError
from annotation.core.services import audit_log_record
from annotation.core.tempfiles import temp_dir
from annotation.curation.models import (
    Curation,
    DatasetExport,
    ExportKind,
    TrajectoryVersion,
)
from annotation.curation.selectors import trajectory_from_stored
from annotation.curation.services import curation_create
from annotation.spectra.held_out import held_out_overlap, refusal
from annotation.spectra.models import Label, Spectrum, Task

# --- curation: imports ----------------------------------------------------------------------------


@dataclass(frozen=True)
class CurationImportResult:
    created: list[Curation]
    skipped: list[str]  # one sentence per trajectory that could not be imported


def _spectrum_for(trajectory: Trajectory) -> Spectrum | None:
    from agent.formats import specvi_code

    meta = trajectory.meta
    if meta.get("sample_index") is not None:
        rows = Spectrum.objects.filter(meta__index=meta["sample_index"])
        by_task = rows.filter(meta__task__iexact=specvi_code(trajectory.task))
        return (by_task if by_task.exists() else rows).order_by("id").first()
    rows = Spectrum.objects.filter(object_id=trajectory.spectrum.object_id)
    if trajectory.spectrum.survey not in ("", "unknown"):
        rows = rows.filter(survey=trajectory.spectrum.survey)
    return rows.order_by("id").first()


def curation_import(
    *,
    trajectories: Iterable[Trajectory],
    created_by: User | None,
    source: str,
) -> CurationImportResult:
    """Import existing trajectories (ShareGPT cold-start rows or project JSON) for screening.

    Each needs its spectrum in the database (so revisions can re-render the tool's views): a
    ShareGPT row is matched to a SpecVI-Bench row by sample index, project JSON by object id.
    """
    created: list[Curation] = []
    skipped: list[str] = []
    tasks = {task.code: task for task in Task.objects.all()}
    for position, trajectory in enumerate(trajectories):
        where = f"trajectory {position + 1} ({trajectory.spectrum.object_id})"
        task = tasks.get(trajectory.task)
        if task is None:
            skipped.append(f"{where}: unknown task {trajectory.task!r}")
            continue
        spectrum = _spectrum_for(trajectory)
        if spectrum is None:
            skipped.append(
                f"{where}: its spectrum is not loaded; load the SpecVI-Bench parquet or the "
                "survey file first"
            )
            continue
        truth = trajectory.meta.get("ground_truth") or spectrum.label
        if truth not in Label.values:
            skipped.append(f"{where}: no YES/NO ground truth in the row or on the spectrum")
            continue
        created.append(
            curation_create(
                spectrum=spectrum,
                task=task,
                trajectory=trajectory,
                ground_truth=truth,
                source=source,
                created_by=created_by,
            )
        )
    return CurationImportResult(created=created, skipped=skipped)


# --- datasets ------------------------------------------------------------------------------------

_ZIP_DATE = (1980, 1, 1, 0, 0, 0)


def zip_bytes(files: dict[str, bytes]) -> bytes:
    """A zip whose bytes depend only on the file names and contents (sorted, fixed dates)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name in sorted(files):
            info = zipfile.ZipInfo(name, date_time=_ZIP_DATE)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            archive.writestr(info, files[name])
    return buffer.getvalue()


def files_digest(files: dict[str, bytes]) -> tuple[str, dict[str, str]]:
    """An export's content hash (over each file's name and SHA-256) and the per-file hashes."""
    digest = hashlib.sha256()
    for name in sorted(files):
        digest.update(name.encode() + b"\0" + hashlib.sha256(files[name]).digest())
    return digest.hexdigest(), {
        name: hashlib.sha256(data).hexdigest() for name, data in sorted(files.items())
    }


def image_paths(pngs: Iterable[bytes], files: dict[str, bytes]) -> list[str]:
    """Add each PNG to ``files`` under its content hash; their archive paths, in order."""
    paths = []
    for png in pngs:
        name = f"images/{hashlib.sha256(png).hexdigest()}.png"
        files[name] = png
        paths.append(name)
    return paths


@dataclass(frozen=True)
class SFTEntry:
    """One SFT row: a curation, the version of it to train on and what the row came from."""

    curation: Curation
    version: TrajectoryVersion
    provenance: dict[str, Any]


def sft_files(
    entries: Iterable[SFTEntry], *, name: str = "specvet cold-start SFT dataset"
) -> tuple[dict[str, bytes], dict[str, Any]]:
    """An SFT dataset's files (TRL jsonl, ShareGPT json, PNGs) and its manifest body; each TRL
    row carries its entry's provenance beside the curation and version it holds."""
    from agent.formats import to_sharegpt_row, to_trl_example

    files: dict[str, bytes] = {}
    trl_lines: list[str] = []
    sharegpt_rows: list[dict[str, Any]] = []
    counts: dict[str, dict[str, int]] = {}
    with tempfile.TemporaryDirectory(prefix="specvet-export-", dir=temp_dir()) as tmp:
        image_dir = Path(tmp) / "sharegpt_images"
        for entry in entries:
            curation, version = entry.curation, entry.version
            trajectory = trajectory_from_stored(version.data)
            example = to_trl_example(trajectory, images_as="png")
            row = {
                "messages": example["messages"],
                "images": image_paths(example["images"], files),
                "task": curation.task.code,
                "ground_truth": curation.ground_truth,
                "curation_id": curation.pk,
                "version": version.number,
                "trajectory_id": trajectory.id,
            }
            if entry.provenance:
                row["provenance"] = entry.provenance
            trl_lines.append(json.dumps(row, ensure_ascii=False, sort_keys=True))
            sharegpt_rows.append(
                to_sharegpt_row(
                    trajectory,
                    image_dir=image_dir,
                    image_prefix="sharegpt_images",
                    sample_index=curation.pk,
                    ground_truth=curation.ground_truth,
                )
            )
            per_task = counts.setdefault(curation.task.code, {"YES": 0, "NO": 0})
            per_task[curation.ground_truth] += 1
        for image in sorted(image_dir.glob("*.png")) if image_dir.exists() else []:
            files[f"sharegpt_images/{image.name}"] = image.read_bytes()
    files["trl.jsonl"] = ("\n".join(trl_lines) + "\n").encode() if trl_lines else b""
    files["sharegpt.json"] = (
        json.dumps(sharegpt_rows, ensure_ascii=False, indent=2, sort_keys=True) + "\n"
    ).encode()
    content_hash, file_hashes = files_digest(files)
    body = {
        "name": name,
        "n_trajectories": len(trl_lines),
        "counts": counts,
        "formats": {
            "trl": "trl.jsonl (messages + images paths; tool results are user <tool_response> turns)",
            "sharegpt": "sharegpt.json (LLaMA-Factory ShareGPT, images in sharegpt_images/)",
        },
        "files": file_hashes,
        "content_hash": content_hash,
    }
    return files, body


def dataset_files(curations: Iterable[Curation]) -> tuple[dict[str, bytes], dict[str, Any]]:
    """The accepted-trajectory SFT dataset's files and manifest body (each curation's head)."""
    return sft_files(
        SFTEntry(curation, curation.versions.get(number=curation.head_number), {})
        for curation in curations
    )


@transaction.atomic
def dataset_export_create(
    *, actor: User | None, task: str = "", withheld_from_actor: frozenset[int] = frozenset()
) -> DatasetExport:
    """Export the accepted trajectories as the next dataset version (or the latest, if equal).

    ``withheld_from_actor``: curations the actor may not read (annotation/blinding.py). An
    export holding one is refused to them: the export names its curations, and they rate
    trajectories taken from them in an open campaign.
    """
    from annotation.curation.selectors import accepted_curations

    curations = list(accepted_curations(task=task))
    if not curations:
        raise WorkflowError("there is no accepted trajectory to export yet")
    if withheld_from_actor & {curation.pk for curation in curations}:
        raise NotAllowed(
            "you rate an open campaign with trajectories from these accepted curations; an "
            "export would show you their sources: export after the campaign closes, or ask "
            "an ML engineer who does not rate it"
        )
    leak = held_out_overlap(
        "the SFT export", spectrum_ids=[curation.spectrum_id for curation in curations]
    )
    if leak:
        raise WorkflowError(refusal(leak))
    files, body = dataset_files(curations)
    latest = (
        DatasetExport.objects.select_for_update()
        .filter(kind=ExportKind.ACCEPTED)
        .order_by("-version")
        .first()
    )
    if latest is not None and latest.content_hash == body["content_hash"]:
        return latest
    version = (latest.version if latest else 0) + 1
    manifest = {**body, "version": version, "task_filter": task or None}
    files["manifest.json"] = (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode()
    export = DatasetExport(
        version=version,
        content_hash=body["content_hash"],
        manifest=manifest,
        curation_ids=sorted(curation.pk for curation in curations),
        created_by=actor if actor is not None and actor.is_authenticated else None,
    )
    export.archive.save(f"specvet-sft-v{version}.zip", ContentFile(zip_bytes(files)), save=False)
    export.save()
    audit_log_record(
        actor=actor,
        action="dataset_exported",
        obj=export,
        comment=f"version {version}: {body['n_trajectories']} trajectories",
        data={"content_hash": body["content_hash"]},
    )
    return export


def export_save(
    *,
    kind: str,
    files: dict[str, bytes],
    body: dict[str, Any],
    actor: User | None,
    curation_ids: Iterable[int],
    content_hashes: Iterable[str],
    run_ids: Iterable[int] = (),
    task: str = "",
) -> DatasetExport:
    """Store ``files`` as the next version of ``kind`` (or return the latest version of that
    kind when its content is the same), with what the blinding rule reads and an audit entry.
    The caller holds the transaction."""
    latest = (
        DatasetExport.objects.select_for_update().filter(kind=kind).order_by("-version").first()
    )
    if latest is not None and latest.content_hash == body["content_hash"]:
        return latest
    version = (latest.version if latest else 0) + 1
    manifest = {**body, "kind": kind, "version": version, "task_filter": task or None}
    files = {
        **files,
        "manifest.json": (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode(),
    }
    export = DatasetExport(
        kind=kind,
        version=version,
        content_hash=body["content_hash"],
        manifest=manifest,
        curation_ids=sorted(set(curation_ids)),
        run_ids=sorted(set(run_ids)),
        content_hashes=sorted(set(content_hashes)),
        created_by=actor if actor is not None and actor.is_authenticated else None,
    )
    export.archive.save(f"specvet-{kind}-v{version}.zip", ContentFile(zip_bytes(files)), save=False)
    export.save()
    audit_log_record(
        actor=actor,
        action=f"{kind}_export_created",
        obj=export,
        comment=f"{ExportKind(kind).label} version {version}",
        data={"content_hash": body["content_hash"], "rows": body.get("rows")},
    )
    return export
