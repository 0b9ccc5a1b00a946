"""Training-run writes: start, claim, record metrics and checkpoints, cancel."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction

from agent import inspection_tasks as agent_tasks
from annotation.core.errors import FieldRefused, WorkflowError
from annotation.core.models import Job, JobState
from annotation.core.services import audit_log_record, job_cancel, job_claim, job_succeed
from annotation.curation.models import (
    DatasetExport,
    ExportKind,
)
from annotation.training_runs.models import (
    PolicyCheckpoint,
    TrainingMetric,
    TrainingRun,
    TrainingStage,
)

# --- training runs ------------------------------------------------------------------------------

TRAINING_JOB_KIND = "training"
# Overrides the start form and the API accept, with the type each must have.
TRAINING_OVERRIDES: dict[str, type] = {
    "learning_rate": float,
    "num_train_epochs": float,
    "max_steps": int,
    "use_lora": bool,
    "lora_r": int,
}
# Where a run keeps the data it materializes (relative to its output dir); the CLI reads the same.
SFT_DATA_FILE = "dataset/sharegpt.json"
GRPO_DATA_FILE = "dataset/label_only.parquet"
DPO_DATA_FILE = "dataset/dpo.jsonl"
# Which export kinds (curation.models.ExportKind) each stage that trains on an export reads.
STAGE_EXPORT_KINDS = {
    TrainingStage.SFT: (ExportKind.ACCEPTED, ExportKind.REVISED),
    TrainingStage.DPO: (ExportKind.PREFERENCE,),
}
STAGE_EXPORT_NEEDS = {
    TrainingStage.SFT: "a dataset export of accepted or expert-revised trajectories",
    TrainingStage.DPO: "a preference export (DPO pairs)",
}
LABEL_SOURCE_MAX = 100000


def _training_overrides(overrides: dict[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(overrides) - set(TRAINING_OVERRIDES))
    if unknown:
        raise WorkflowError(
            f"unknown overrides {unknown}; allowed: {', '.join(sorted(TRAINING_OVERRIDES))}"
        )
    checked: dict[str, Any] = {}
    for key, value in overrides.items():
        if value is None:
            continue
        kind = TRAINING_OVERRIDES[key]
        if kind is bool:
            if not isinstance(value, bool):
                raise WorkflowError(f"override {key} must be true or false; got {value!r}")
        elif isinstance(value, bool) or not isinstance(value, int | float):
            raise WorkflowError(f"override {key} must be a number; got {value!r}")
        elif kind is int and float(value) != int(value):
            raise WorkflowError(f"override {key} must be a whole number; got {value!r}")
        value = kind(value)
        if kind is not bool and not (math.isfinite(value) and value > 0):
            raise WorkflowError(f"override {key} must be positive; got {value!r}")
        checked[key] = value
    if checked.get("learning_rate", 0.0) > 1.0:
        raise WorkflowError(f"learning_rate {checked['learning_rate']} is above 1")
    return checked


def _label_export_source(source: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """A GRPO source that is a vetted-label export: ``{"label_export": version}``."""
    from annotation.spectra.models import LabelExport

    version = source.get("label_export")
    if isinstance(version, bool) or not isinstance(version, int):
        raise WorkflowError(f"label_export must be an export version number; got {version!r}")
    export = LabelExport.objects.filter(version=version).first()
    if export is None:
        raise WorkflowError(f"there is no vetted-label export version {version}")
    extra = sorted(set(source) - {"label_export"})
    if extra:
        raise WorkflowError(f"a label_export source takes no other keys; got {extra}")
    return {"label_export": version, "content_hash": export.content_hash}, len(export.rows)


def _label_source(source: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """The normalized GRPO source and how many labelled spectra it selects."""
    from annotation.training_runs.selectors import label_only_spectra

    if "label_export" in source:
        return _label_export_source(source)

    tasks: set[str] = set()
    for code in source.get("tasks") or []:
        try:
            tasks.add(agent_tasks.get_task(str(code)).code)
        except agent_tasks.UnknownTaskError as error:
            raise WorkflowError(f"GRPO rewards need a built-in task: {error}") from error
    normalized: dict[str, Any] = {
        "dataset": str(source.get("dataset") or "").strip(),
        "split": str(source.get("split") or "").strip(),
        "tasks": sorted(tasks),
        "limit": source.get("limit") or LABEL_SOURCE_MAX,
    }
    if not normalized["dataset"]:
        raise WorkflowError("GRPO needs the data set of its label-only spectra")
    if not normalized["tasks"]:
        raise WorkflowError("GRPO needs at least one task")
    limit = normalized["limit"]
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= LABEL_SOURCE_MAX:
        raise WorkflowError(f"limit must be a whole number from 1 to {LABEL_SOURCE_MAX}")
    count = label_only_spectra(**normalized).count()
    if not count:
        raise WorkflowError(
            f"no spectrum labelled YES or NO for tasks {', '.join(normalized['tasks'])} in data "
            f"set {normalized['dataset']!r}"
            + (f", split {normalized['split']!r}" if normalized["split"] else "")
        )
    return normalized, count


def _training_config(
    *, stage: str, preset: str, overrides: dict[str, Any], base_model: str, output_dir: Path
) -> dict[str, Any]:
    """The run's complete YAML config: preset file, overrides, then this run's model and data."""
    from annotation.training_runs.selectors import TRAINING_DATA_KEYS, training_preset_values

    values = {
        key: value
        for key, value in training_preset_values(stage=stage, preset=preset).items()
        if key not in TRAINING_DATA_KEYS
    }
    values.update(overrides)
    values["model_name_or_path"] = base_model
    values["output_dir"] = str(output_dir)
    values["run_name"] = output_dir.name
    if stage == TrainingStage.SFT:
        values["sharegpt"] = [str(output_dir / SFT_DATA_FILE)]
    elif stage == TrainingStage.DPO:
        values["preference_pairs"] = [str(output_dir / DPO_DATA_FILE)]
    else:
        values["verl_parquet"] = [str(output_dir / GRPO_DATA_FILE)]
    return values


@transaction.atomic
def training_run_create(
    *,
    stage: str,
    preset: str,
    created_by: User | None,
    base_model: str = "",
    base_checkpoint: PolicyCheckpoint | None = None,
    dataset_export: DatasetExport | None = None,
    label_source: dict[str, Any] | None = None,
    overrides: dict[str, Any] | None = None,
    name: str = "",
) -> TrainingRun:
    """Record an SFT, GRPO or DPO run and its job; the gpu-queue task is enqueued on commit.

    SFT trains on ``dataset_export`` (accepted or expert-revised trajectories), DPO on
    ``dataset_export`` of preference pairs; GRPO on the labelled spectra ``label_source`` selects
    ({dataset, split, tasks, limit}). The base model is ``base_checkpoint``, else the folder
    ``base_model``, else the preset's model_name_or_path. Paths are checked by the worker, which
    may be another machine.
    """
    from annotation.training_runs import tasks
    from annotation.training_runs.selectors import (
        TRAINING_PRESETS,
        training_output_root,
        training_preset_values,
    )

    if stage not in TrainingStage.values:
        raise WorkflowError(
            f"stage must be one of {', '.join(TrainingStage.values)}; got {stage!r}"
        )
    if preset not in TRAINING_PRESETS:
        raise WorkflowError(f"preset must be one of {', '.join(TRAINING_PRESETS)}; got {preset!r}")
    preset_values = training_preset_values(stage=stage, preset=preset)
    checked = _training_overrides(overrides or {})
    if base_checkpoint is not None:
        base_model = base_checkpoint.path
    elif base_model.strip():
        base_model = _checked_model_path(base_model, field="base_model")
    base_model = (base_model or str(preset_values.get("model_name_or_path") or "")).strip()
    if not base_model:
        raise WorkflowError(f"the {preset} preset names no base model: give a checkpoint folder")
    source: dict[str, Any] = {}
    if stage in STAGE_EXPORT_KINDS:
        kinds = STAGE_EXPORT_KINDS[TrainingStage(stage)]
        if dataset_export is None or dataset_export.kind not in kinds:
            needs = STAGE_EXPORT_NEEDS[TrainingStage(stage)]
            raise WorkflowError(f"{stage.upper()} needs {needs}")
        params = {
            "stage": stage,
            "dataset_export": dataset_export.version,
            "kind": dataset_export.kind,
        }
    else:
        source, count = _label_source(label_source or {})
        params = {"stage": stage, "label_source": source, "spectra": count}
    user = created_by if created_by is not None and created_by.is_authenticated else None
    job = Job.objects.create(kind=TRAINING_JOB_KIND, params=params, created_by=user)
    run = TrainingRun.objects.create(
        name=name.strip()[:120],
        stage=stage,
        preset=preset,
        overrides=checked,
        base_model=base_model[:500],
        base_checkpoint=base_checkpoint,
        dataset_export=dataset_export if stage in STAGE_EXPORT_KINDS else None,
        label_source=source,
        job=job,
        created_by=user,
    )
    output_dir = training_output_root() / f"{stage}-run-{run.pk}"
    run.output_dir = str(output_dir)
    run.config = _training_config(
        stage=stage, preset=preset, overrides=checked, base_model=base_model, output_dir=output_dir
    )
    run.save(update_fields=["output_dir", "config"])
    Job.objects.filter(pk=job.pk).update(params={**params, "training_run": run.pk})
    audit_log_record(
        actor=created_by,
        action="training_run_created",
        obj=run,
        to_state=job.state,
        comment=f"{stage} from {base_model} ({preset})",
        data={"overrides": checked},
    )
    transaction.on_commit(lambda: tasks.run_training.delay(run.pk))
    return run


@transaction.atomic
def unfinished_training_runs_resend() -> int:
    """Send every queued or running training run again (``core.services.unfinished_jobs_resend``
    for their jobs); returns how many."""
    from annotation.training_runs import tasks

    ids = list(
        TrainingRun.objects.filter(job__state__in=[JobState.QUEUED, JobState.RUNNING])
        .order_by("pk")
        .values_list("pk", flat=True)
    )
    for run_id in ids:
        tasks.run_training.delay(run_id)
    return len(ids)


def training_run_claim(*, run_id: int) -> bool:
    """Claim the run's job for this worker (see job_claim). A redelivered run starts over, so
    the metrics of the interrupted attempt are dropped."""
    run = TrainingRun.objects.get(pk=run_id)
    if not job_claim(job_id=run.job_id):
        return False
    TrainingMetric.objects.filter(run=run).delete()
    return True


def training_metrics_record(
    *, run_id: int, step: int, metrics: dict[str, float], epoch: float | None = None
) -> None:
    """Store one step's metrics; a value logged twice for the same step keeps the last one."""
    rows = [
        TrainingMetric(run_id=run_id, step=step, name=name[:64], value=value, epoch=epoch)
        for name, value in metrics.items()
        if math.isfinite(value)
    ]
    TrainingMetric.objects.bulk_create(
        rows,
        update_conflicts=True,
        unique_fields=["run", "name", "step"],
        update_fields=["value", "epoch"],
    )


def training_run_step(*, run_id: int, step: int, total: int) -> None:
    Job.objects.filter(training_run__pk=run_id).update(done=step, total=max(total, step))


@transaction.atomic
def training_run_finish(
    *, run_id: int, checkpoint_path: str | Path, result: dict[str, Any]
) -> PolicyCheckpoint | None:
    """Register the saved checkpoint as a policy and mark the job succeeded. A run cancelled
    while its last steps ran is left cancelled and registers nothing (returns None)."""
    run = TrainingRun.objects.select_for_update().select_related("job").get(pk=run_id)
    if run.job.state != JobState.RUNNING:
        return None
    name = run.name or f"{run.stage}-run-{run.pk}"
    if PolicyCheckpoint.objects.filter(name=name).exists():
        name = f"{name} (run {run.pk})"
    checkpoint = policy_checkpoint_register(
        path=checkpoint_path, name=name, actor=run.created_by, run=run
    )
    job_succeed(job_id=run.job_id, result={**result, "checkpoint": checkpoint.pk})
    return checkpoint


@transaction.atomic
def training_run_cancel(*, run: TrainingRun, actor: User) -> bool:
    """Cancel the run's job; a training loop stops at its next step and registers nothing."""
    return job_cancel(job=run.job, actor=actor)


@transaction.atomic
def policy_checkpoint_register(
    *,
    path: str | Path,
    name: str,
    actor: User | None,
    run: TrainingRun | None = None,
) -> PolicyCheckpoint:
    """Register a checkpoint folder with its specvet_lineage.json as a selectable policy."""
    from training.checkpoint import LineageError, load_lineage

    folder = Path(path).resolve()
    try:
        lineage = load_lineage(folder)
    except LineageError as error:
        raise WorkflowError(f"cannot register {folder}: {error}") from error
    name = name.strip()[:120] or folder.name[:120]
    if PolicyCheckpoint.objects.filter(name=name).exists():
        raise WorkflowError(f"a checkpoint named {name!r} is already registered")
    existing = PolicyCheckpoint.objects.filter(path=str(folder)).first()
    if existing is not None:
        raise WorkflowError(f"{folder} is already registered as {existing.name!r}")
    checkpoint = PolicyCheckpoint.objects.create(
        name=name,
        stage=lineage.stage,
        path=str(folder),
        lineage=lineage.to_dict(),
        dataset_version=lineage.dataset_version[:64],
        base_model=lineage.base_model[:500],
        run=run,
        created_by=actor if actor is not None and actor.is_authenticated else None,
    )
    audit_log_record(
        actor=actor,
        action="policy_checkpoint_registered",
        obj=checkpoint,
        comment=f"{lineage.stage} checkpoint at {folder}",
        data={"dataset_version": lineage.dataset_version, "run": run.pk if run else None},
    )
    return checkpoint


def _checked_model_path(raw: Any, *, field: str = "model_path") -> str:
    """A local checkpoint folder the server may load: registered, or inside a configured root.

    The filesystem twin of registered endpoints: a path typed by a user never makes the server
    load (and so read, and run the code of) an arbitrary folder. ``field``: the input that gave
    the path, named in the refusal.
    """
    if not isinstance(raw, str) or not raw.strip():
        raise FieldRefused(
            field=field, reason="is empty: a local checkpoint policy needs its folder"
        )
    # Lexical, not resolve(): the folder is loaded by a worker, maybe on another machine.
    folder = Path(os.path.normpath(raw.strip()))
    if PolicyCheckpoint.objects.filter(path=str(folder)).exists():
        return str(folder)
    roots = [Path(os.path.normpath(root)) for root in settings.POLICY_CHECKPOINT_ROOTS]
    if folder.is_absolute() and any(folder.is_relative_to(root) for root in roots):
        return str(folder)
    raise FieldRefused(
        field=field,
        reason=f"{raw.strip()!r} is neither a registered checkpoint nor inside a checkpoint "
        f"folder ({', '.join(str(root) for root in roots)}); staff set POLICY_CHECKPOINT_ROOTS",
    )
