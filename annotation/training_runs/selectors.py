"""Training-run reads: presets, progress, chart points, checkpoints and lineage."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from django.conf import settings
from django.db.models import QuerySet

from annotation.core.models import JobState
from annotation.spectra.models import Spectrum
from annotation.training_runs.models import PolicyCheckpoint, TrainingMetric, TrainingRun

# --- training runs ------------------------------------------------------------------------------

# preset -> suffix of training/configs/<stage>_<suffix>.yaml
TRAINING_PRESETS = {"cpu-tiny": "cpu_tiny", "gpu": "gpu"}
# Keys of a preset file that choose data or outputs; a run from the app sets its own.
TRAINING_DATA_KEYS = frozenset(
    {
        "model_name_or_path",
        "output_dir",
        "run_name",
        "metrics_jsonl",
        "trajectories",
        "sharegpt",
        "smoke_tasks",
        "smoke_samples_per_task",
        "specvi_mini_tasks",
        "specvi_mini_split",
        "specvi_mini_positives",
        "specvi_mini_negatives",
        "specvi_mini_seed",
        "verl_parquet",
        "preference_pairs",
    }
)
# The curves of paper Figure 6 (names from training.callbacks).
CHART_METRICS = (
    "loss",
    "reward_mean",
    "tool_calls_mean",
    "val_tool_calls_mean",
    "response_length_mean",
    "val_f1",
    "batch_f1",
)


def training_preset_path(*, stage: str, preset: str) -> Path:
    return settings.BASE_DIR / "training" / "configs" / f"{stage}_{TRAINING_PRESETS[preset]}.yaml"


def training_preset_values(*, stage: str, preset: str) -> dict[str, Any]:
    """The values of a preset's YAML file (read with the same rules as training.config)."""
    path = training_preset_path(stage=stage, preset=preset)
    values = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    if not isinstance(values, dict):
        raise ValueError(f"config file {path} must hold a YAML mapping of field names to values")
    return values


def training_output_root() -> Path:
    return Path(settings.TRAINING_OUTPUT_ROOT)


def label_only_spectra(
    *, dataset: str, split: str, tasks: list[str], limit: int
) -> QuerySet[Spectrum]:
    """Spectra labelled YES or NO for one of ``tasks``: the rows GRPO learns from."""
    rows = Spectrum.objects.filter(
        dataset=dataset, task__code__in=tasks, label__in=["YES", "NO"]
    ).select_related("task")
    if split:
        rows = rows.filter(split=split)
    return rows.order_by("id")[:limit]


def training_runs() -> QuerySet[TrainingRun]:
    return TrainingRun.objects.select_related(
        "job", "dataset_export", "created_by", "checkpoint", "base_checkpoint"
    ).order_by("-id")


def training_progress(*, run: TrainingRun) -> dict[str, Any]:
    job = run.job
    latest: dict[str, float] = {}
    last_step = run.metrics.filter(name__in=CHART_METRICS).order_by("-step").first()
    if last_step is not None:
        latest = dict(
            run.metrics.filter(step=last_step.step, name__in=CHART_METRICS).values_list(
                "name", "value"
            )
        )
    # A run that failed or was cancelled is as far as its steps got, not "100 %".
    percent = job.percent
    if job.state in (JobState.FAILED, JobState.CANCELLED):
        percent = min(100, round(100 * job.done / job.total)) if job.total else 0
    reason, _, details = (job.error or "").partition("\n\n")
    return {
        "state": job.state,
        "finished": job.finished,
        "step": job.done,
        "total": job.total,
        "percent": percent,
        "error": reason,
        "error_details": details,
        "latest_step": last_step.step if last_step else None,
        "latest": latest,
    }


def training_run_has_f1(*, run: TrainingRun) -> bool:
    """Whether the run measures an F1 to chart: GRPO scores its rollouts; SFT only when its
    config sets validation tasks (an empty F1 chart with an axis of -1 to 4 said nothing)."""
    if run.stage == "grpo":
        return True
    config = run.config if isinstance(run.config, dict) else {}
    return bool(config.get("validation_tasks")) or run.metrics.filter(name="val_f1").exists()


def training_chart_points(*, run: TrainingRun, after: int = 0) -> dict[str, Any]:
    """Figure 6 series recorded after metric row ``after``: {last_id, series: {name: {x, y}}}."""
    rows = (
        run.metrics.filter(pk__gt=after, name__in=CHART_METRICS)
        .order_by("id")
        .values_list("id", "name", "step", "value")
    )
    series: dict[str, dict[str, list[float]]] = {name: {"x": [], "y": []} for name in CHART_METRICS}
    last_id = after
    for pk, name, step, value in rows:
        series[name]["x"].append(step)
        series[name]["y"].append(value)
        last_id = max(last_id, pk)
    return {"last_id": last_id, "series": series}


def training_metrics(
    *, run: TrainingRun, names: list[str] | None = None, after: int = 0
) -> QuerySet[TrainingMetric]:
    rows = run.metrics.filter(pk__gt=after)
    if names:
        rows = rows.filter(name__in=names)
    return rows.order_by("id")


def policy_checkpoints() -> QuerySet[PolicyCheckpoint]:
    return PolicyCheckpoint.objects.select_related("run", "created_by").order_by("-id")


def checkpoint_for_policy_spec(spec: dict[str, Any]) -> PolicyCheckpoint | None:
    """The registered checkpoint an inspection run's policy loads, when it is one."""
    if spec.get("kind") != "transformers" or not spec.get("model_path"):
        return None
    return PolicyCheckpoint.objects.filter(path=str(spec["model_path"])).first()


def lineage_summary(lineage: dict[str, Any]) -> dict[str, Any]:
    """What a policy chooser shows of a lineage: data, base model and the main settings."""
    config = lineage.get("config") or {}
    training = (
        config.get("SpecvetSFTConfig")
        or config.get("SpecvetGRPOConfig")
        or config.get("SpecvetDPOConfig")
        or {}
    )
    model = config.get("ModelArguments") or {}
    dataset = lineage.get("dataset") or {}
    sources = dataset.get("sources") or {}
    base = lineage.get("base_lineage") or {}
    return {
        "stage": lineage.get("stage", ""),
        "base_model": lineage.get("base_model", ""),
        "base_stage": base.get("stage", ""),
        "dataset_version": lineage.get("dataset_version", ""),
        "rows": dataset.get("rows"),
        "dataset_export": sources.get("dataset_export"),
        "label_source": sources.get("label_source"),
        "learning_rate": training.get("learning_rate"),
        "num_train_epochs": training.get("num_train_epochs"),
        "max_steps": training.get("max_steps"),
        "use_lora": model.get("use_lora"),
        "lora_r": model.get("lora_r") if model.get("use_lora") else None,
        "created_at": lineage.get("created_at", ""),
        "code_version": lineage.get("code_version", ""),
        "metrics": lineage.get("metrics") or {},
    }
