"""Writes on tasks and spectra: seeding tasks, loading and labelling spectra, uploads."""

from __future__ import annotations

import hashlib
import re
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from django.conf import settings
from django.contrib.auth.models import User
from django.core.files.uploadedfile import UploadedFile
from django.db import IntegrityError, transaction

from agent import inspection_tasks as agent_tasks
from agent.resolution import Resolution
from agent.spectra import Declared, SpectrumFormatError, load_spectra, spectrum_to_npz_bytes
from agent.spectra import Spectrum as SpectrumValue
from annotation.core.errors import UploadRejected
from annotation.core.services import audit_log_record
from annotation.core.tempfiles import temp_dir
from annotation.spectra.models import Spectrum, Task
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
    digest = hashlib.sha256()
    for array in (value.wavelength, value.flux):
        digest.update(np.ascontiguousarray(array, dtype=np.float64).tobytes())
    return digest.hexdigest()


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
