"""The worker side of a training run: materialize its data, train with TRL, register the result.

Called by ``annotation.training_runs.tasks.run_training`` on a ``gpu`` queue worker (in-process in the embedded
default). Each run writes what it trains on into its output dir (``dataset/sharegpt.json`` from
an SFT export, ``dataset/dpo.jsonl`` and its images from a preference export for DPO,
``dataset/label_only.parquet`` from labelled spectra for GRPO) and
its whole config to ``run_config.yaml``, so ``python -m training.<stage> --config
OUTPUT_DIR/run_config.yaml`` repeats it without the app. Metrics go to the database (and to
``metrics.jsonl`` beside the checkpoint); the finished checkpoint is registered as a policy.

This module imports transformers: only the worker imports it, never a page.
"""

from __future__ import annotations

import logging
import traceback
import zipfile
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any

import yaml
from transformers import TrainerCallback

from annotation.core import errors as core_errors
from annotation.core import services as core_services
from annotation.curation.models import DatasetExport, ExportKind
from annotation.spectra import selectors as spectra_selectors
from annotation.spectra.held_out import held_out_overlap, refusal
from annotation.spectra.models import LabelExport, Spectrum
from annotation.training_runs import selectors, services
from annotation.training_runs.models import TrainingRun, TrainingStage
from training.callbacks import JsonlMetricsSink, MetricRecord
from training.run import METRICS_FILE

logger = logging.getLogger(__name__)

RUN_CONFIG_FILE = "run_config.yaml"
SHAREGPT_IMAGES = "sharegpt_images"


class DatabaseMetricsSink:
    """training.callbacks sink that stores each record as TrainingMetric rows (and JSONL)."""

    def __init__(self, run_id: int, jsonl_path: Path) -> None:
        self.run_id = run_id
        self.jsonl = JsonlMetricsSink(jsonl_path)

    def write(self, record: MetricRecord) -> None:
        services.training_metrics_record(
            run_id=self.run_id, step=record.step, metrics=record.metrics, epoch=record.epoch
        )
        self.jsonl.write(record)


class JobControlCallback(TrainerCallback):
    """Reports each optimizer step as the job's progress; stops training once it is cancelled."""

    def __init__(self, run_id: int, job_id: int) -> None:
        self.run_id, self.job_id = run_id, job_id

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        services.training_run_step(
            run_id=self.run_id, step=int(state.global_step), total=int(state.max_steps)
        )
        if core_services.job_is_cancelled(job_id=self.job_id):
            control.should_training_stop = True


# --- data ----------------------------------------------------------------------------------------


def extract_sft_export(export: DatasetExport, target: Path) -> Path:
    """Unpack the export's ShareGPT file and its images into ``target``; returns the JSON path.

    Only ``sharegpt.json``, ``manifest.json`` and plain files directly under
    ``sharegpt_images/`` are taken, so a tampered archive cannot write outside ``target``.
    """
    target.mkdir(parents=True, exist_ok=True)
    (target / SHAREGPT_IMAGES).mkdir(exist_ok=True)
    with export.archive.open("rb") as handle, zipfile.ZipFile(handle) as archive:
        names = archive.namelist()
        if "sharegpt.json" not in names:
            raise core_errors.WorkflowError(
                f"dataset export v{export.version} has no sharegpt.json; re-export it"
            )
        for name in names:
            parts = PurePosixPath(name).parts
            wanted = name in ("sharegpt.json", "manifest.json") or (
                len(parts) == 2 and parts[0] == SHAREGPT_IMAGES and parts[1] not in ("", "..")
            )
            if wanted:
                (target / Path(*parts)).write_bytes(archive.read(name))
    return target / "sharegpt.json"


def extract_preference_export(export: DatasetExport, target: Path) -> Path:
    """Unpack a preference export's ``dpo.jsonl``, its manifest and the plain files directly
    under ``images/`` into ``target``; returns the JSONL path (nothing is written elsewhere)."""
    target.mkdir(parents=True, exist_ok=True)
    (target / "images").mkdir(exist_ok=True)
    with export.archive.open("rb") as handle, zipfile.ZipFile(handle) as archive:
        names = archive.namelist()
        if "dpo.jsonl" not in names:
            raise core_errors.WorkflowError(f"preference export v{export.version} has no dpo.jsonl")
        for name in names:
            parts = PurePosixPath(name).parts
            wanted = name in ("dpo.jsonl", "manifest.json") or (
                len(parts) == 2 and parts[0] == "images" and parts[1] not in ("", "..")
            )
            if wanted:
                (target / Path(*parts)).write_bytes(archive.read(name))
    return target / "dpo.jsonl"


def _export_source(export: DatasetExport) -> dict[str, Any]:
    """What the checkpoint's lineage says of the export it learned from: its kind, version and
    hash and, for the loop's kinds, the decisions behind its rows."""
    source: dict[str, Any] = {
        "kind": export.kind,
        "version": export.version,
        "content_hash": export.content_hash,
        "trajectories": export.manifest.get("n_trajectories"),
    }
    if export.kind != ExportKind.ACCEPTED:
        source["rows"] = export.manifest.get("rows")
        source["decisions"] = export.manifest.get("decisions")
        source["curations"] = export.curation_ids
    return source


def _labelled_rows(run: TrainingRun) -> Iterator[tuple[Spectrum, str, str, str]]:
    """(spectrum, task code, label, data source) of each row the run learns from: a vetted-label
    export's own rows (the label as exported, whatever it is now), else label-only spectra."""
    version = run.label_source.get("label_export")
    if version is None:
        for row in selectors.label_only_spectra(**run.label_source):
            assert row.task is not None  # label_only_spectra selects by task code
            yield row, row.task.code, row.label, f"specvet:{row.dataset}"
        return
    export = LabelExport.objects.get(version=version)
    if export.content_hash != run.label_source.get("content_hash"):
        raise core_errors.WorkflowError(
            f"vetted-label export v{version} changed since the run began"
        )
    spectra = Spectrum.objects.in_bulk([item["spectrum_id"] for item in export.rows])
    for item in export.rows:
        yield (
            spectra[item["spectrum_id"]],
            item["task"],
            item["label"],
            f"specvet:vetted-v{version}",
        )


def write_label_only_parquet(run: TrainingRun, path: Path) -> int:
    """The run's labelled spectra as a SpecVI-Bench/verl parquet file (prompt, I0, spectrum)."""
    from agent.formats import to_verl_row, write_verl_parquet
    from agent.inspection_tasks import get_task
    from training.data import prompt_trajectory

    labelled = list(_labelled_rows(run))
    leak = held_out_overlap("the GRPO run's rows", spectrum_ids=[row.pk for row, *_ in labelled])
    if leak:
        raise core_errors.WorkflowError(refusal(leak))
    rows = []
    for row, task_code, label, source in labelled:
        spectrum = spectra_selectors.spectrum_value(row)
        trajectory = prompt_trajectory(spectrum, get_task(task_code))
        rows.append(
            to_verl_row(
                trajectory,
                spectrum=spectrum,
                ground_truth=label,
                index=row.pk,
                split=row.split or "train",
                data_source=source,
            )
        )
    if not rows:
        raise core_errors.WorkflowError(
            f"the label-only source {run.label_source} selects no labelled spectrum any more"
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    write_verl_parquet(rows, path)
    return len(rows)


def prepare_data(run: TrainingRun, output_dir: Path) -> dict[str, Any]:
    """Write the run's training data under ``output_dir``; returns its lineage sources."""
    if run.stage in services.STAGE_EXPORT_KINDS:
        export = run.dataset_export
        if export is None:
            raise core_errors.WorkflowError(f"this {run.stage} run has no dataset export")
        if run.stage == TrainingStage.DPO:
            extract_preference_export(export, output_dir / Path(services.DPO_DATA_FILE).parent)
        else:
            extract_sft_export(export, output_dir / Path(services.SFT_DATA_FILE).parent)
        # The checkpoint's lineage names the export and, for the loop's kinds, its decisions.
        return {"dataset_export": _export_source(export)}
    rows = write_label_only_parquet(run, output_dir / services.GRPO_DATA_FILE)
    version = run.label_source.get("label_export")
    if version is not None:
        labels = LabelExport.objects.get(version=version)
        # The checkpoint's lineage names the expert decisions it learned from.
        return {
            "label_export": {
                "version": version,
                "content_hash": labels.content_hash,
                "rows": rows,
                "labels": [item["label_id"] for item in labels.rows],
                "decisions": labels.manifest.get("decisions", []),
            }
        }
    return {"label_source": {**run.label_source, "rows": rows}}


def write_run_config(run: TrainingRun, output_dir: Path) -> Path:
    path = output_dir / RUN_CONFIG_FILE
    header = (
        f"# specvet training run {run.pk} ({run.stage}, preset {run.preset}); repeat it with\n"
        f"#   python -m training.{run.stage} --config {path}\n"
    )
    path.write_text(header + yaml.safe_dump(run.config, sort_keys=True), encoding="utf-8")
    return path


# --- training ------------------------------------------------------------------------------------


def train(run: TrainingRun, config_path: Path, sources: dict[str, Any]) -> Path | None:
    """Train from ``config_path`` with the database sink; the checkpoint folder, or None when
    the run was cancelled before it finished."""
    from training import dpo, grpo, sft

    sink = DatabaseMetricsSink(run.pk, Path(run.output_dir) / METRICS_FILE)
    if run.stage == TrainingStage.SFT:
        args = sft.parse_args(["--config", str(config_path)])
        built: Any = sft.build_sft_run(*args, sink=sink)
        save: Any = sft.save_sft_run
    elif run.stage == TrainingStage.DPO:
        args = dpo.parse_args(["--config", str(config_path)])
        built = dpo.build_dpo_run(*args, sink=sink)
        save = dpo.save_dpo_run
    else:
        args = grpo.parse_args(["--config", str(config_path)])
        built = grpo.build_grpo_run(*args, sink=sink)
        save = grpo.save_grpo_run
    built.sources.update(sources)
    built.trainer.add_callback(JobControlCallback(run.pk, run.job_id))
    built.trainer.train()
    if core_services.job_is_cancelled(job_id=run.job_id):
        return None
    return Path(save(built, *args))


def check_base_model(run: TrainingRun) -> None:
    """A base model named by a folder must be on this worker: say so, with the command that
    builds the tiny CPU model, before a training step is tried (a hub id is left to HF)."""
    raw = run.base_model.strip()
    if not raw.startswith(("/", "./", "../", "~")):
        return
    folder = Path(raw).expanduser()
    if folder.is_dir():
        return
    hint = (
        f"build the tiny CPU model there with `python -m training.tiny_model {raw}`"
        if "tiny" in folder.name
        else "copy the checkpoint there, or start from a registered checkpoint instead "
        "(for a CPU trial: the cpu-tiny preset and `python -m training.tiny_model`)"
    )
    raise core_errors.WorkflowError(
        f"The base model folder {raw} does not exist on the training worker; {hint}, "
        "then start the run again."
    )


def run_training(run_id: int) -> None:
    """Run a claimed training run to its end; any failure is stored on its job with the reason."""
    run = TrainingRun.objects.select_related("dataset_export").get(pk=run_id)
    try:
        check_base_model(run)
        output_dir = Path(run.output_dir)
        output_dir.mkdir(parents=True, exist_ok=True)
        sources = prepare_data(run, output_dir)
        checkpoint = train(run, write_run_config(run, output_dir), sources)
        if checkpoint is None:
            logger.info("training run %s was cancelled", run_id)
            return
        services.training_run_finish(
            run_id=run.pk,
            checkpoint_path=checkpoint,
            result={"checkpoint_path": str(checkpoint), "sources": sources},
        )
    except core_errors.WorkflowError as error:  # a reason a user can act on, no traceback
        logger.warning("training run %s refused: %s", run_id, error)
        core_services.job_fail(job_id=run.job_id, error=str(error))
    except Exception as error:  # the reason is shown on the run page, the traceback folded
        logger.exception("training run %s failed", run_id)
        core_services.job_fail(
            job_id=run.job_id,
            error=f"{type(error).__name__}: {error}\n\n{traceback.format_exc(limit=5)}",
        )
