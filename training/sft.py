"""Cold-start SFT of the inspection agent on accepted trajectories (paper section 3.2).

TRL ``SFTTrainer`` on ``messages`` + ``images`` rows with ``assistant_only_loss=True``: only the
assistant turns and their ``<|im_end|>\\n`` carry loss; the system prompt, T0 and every tool
result (image tokens included) are masked (ml_path.md section 1). The vision tower is frozen by
default; ``--use_lora`` trains adapters instead of all weights (merged when saved).

# GPU: the public recipe on a curation export
```bash
python -m training.sft --config training/configs/sft_gpu.yaml \\
    --model_name_or_path /models/Qwen2.5-VL-7B-Instruct \\
    --trajectories exports/accepted.jsonl --output_dir runs/sft-7b
```

# CPU smoke run on the tiny random model
```bash
python -m training.tiny_model /tmp/specvet-tiny-qwen25vl
python -m training.sft --config training/configs/sft_cpu_tiny.yaml
```

The finished checkpoint (weights, processor, chat template, ``specvet_lineage.json``) is written
to ``--output_dir``; per-step metrics go to ``--metrics_jsonl`` (default OUTPUT_DIR/metrics.jsonl).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.trajectory import Trajectory
from training.callbacks import (
    JsonlMetricsSink,
    MetricsCallback,
    MetricsSink,
    ValidationF1Callback,
    canonical_metrics,
)
from training.checkpoint import new_lineage, save_trained
from training.config import (
    DataArguments,
    ModelArguments,
    RunArguments,
    SpecvetSFTConfig,
    config_to_dict,
    parse_config,
)
from training.data import (
    SFTData,
    TrainingDataError,
    build_sft_dataset,
    load_trajectories_jsonl,
    smoke_trajectories,
    specvi_mini_items,
)

logger = logging.getLogger(__name__)
METRICS_FILE = "metrics.jsonl"


# --- shared with training.grpo -----------------------------------------------------------------


def load_model(model_args: ModelArguments) -> Any:
    """The Qwen2.5-VL model of ``model_args``, vision tower frozen when asked."""
    from transformers import Qwen2_5_VLForConditionalGeneration

    path = _model_path(model_args)
    model = Qwen2_5_VLForConditionalGeneration.from_pretrained(str(path), dtype=model_args.dtype)
    if model_args.freeze_vision_tower:
        pattern = re.compile(model_args.lora_exclude_modules)
        for name, parameter in model.named_parameters():
            if pattern.fullmatch(name):
                parameter.requires_grad_(False)
    return model


def load_training_processor(model_args: ModelArguments) -> Any:
    from agent.policies.qwen_processor import load_processor

    return load_processor(_model_path(model_args), max_pixels=model_args.max_pixels)


def lora_config(model_args: ModelArguments) -> Any:
    """The peft LoraConfig of ``model_args``, or None for full fine-tuning."""
    if not model_args.use_lora:
        return None
    from peft import LoraConfig

    return LoraConfig(
        r=model_args.lora_r,
        lora_alpha=model_args.lora_alpha,
        lora_dropout=model_args.lora_dropout,
        target_modules=list(model_args.lora_target_modules),
        exclude_modules=model_args.lora_exclude_modules,
        task_type="CAUSAL_LM",
    )


def metrics_sink(run_args: RunArguments, output_dir: str | None) -> JsonlMetricsSink:
    if run_args.metrics_jsonl:
        return JsonlMetricsSink(run_args.metrics_jsonl)
    if not output_dir:
        raise ValueError("set output_dir or metrics_jsonl so metrics have somewhere to go")
    return JsonlMetricsSink(Path(output_dir) / METRICS_FILE)


def run_callbacks(
    run_args: RunArguments,
    processor: Any,
    sink: MetricsSink,
    *,
    stage: str,
    run_name: str,
    use_tool: bool = True,
) -> list[Any]:
    """The metrics callback, plus the validation-F1 callback when validation tasks are set."""
    callbacks: list[Any] = [MetricsCallback(sink, stage=stage, run=run_name)]
    if run_args.validation_tasks:
        samples, source = validation_samples(run_args)
        callbacks.append(
            ValidationF1Callback(
                samples,
                processor,
                sink,
                stage=stage,
                every_steps=run_args.validation_every_steps,
                max_new_tokens=run_args.validation_max_new_tokens,
                max_tool_calls=run_args.validation_max_tool_calls,
                run=run_name,
                source=source,
                use_tool=use_tool,
            )
        )
    return callbacks


def validation_samples(run_args: RunArguments) -> tuple[list[Any], str]:
    """The labelled validation set and its source ("real" or "synthetic")."""
    from agent.evaluation import EvalSample

    if run_args.validation_source not in ("auto", "real", "synthetic"):
        raise ValueError(
            f"validation_source must be auto, real or synthetic; got {run_args.validation_source!r}"
        )
    if run_args.validation_source != "synthetic":
        real = real_validation_samples(run_args)
        if real:
            return real, "real"
        if run_args.validation_source == "real":
            raise ValueError(
                f"no real validation spectra for tasks {run_args.validation_tasks}: run "
                "`make real-data` (agent.real_corpus fetch) or set validation_source synthetic"
            )
    n_pos = (run_args.validation_samples_per_task + 1) // 2
    items = specvi_mini_items(
        run_args.validation_tasks,
        split="test",
        n_pos=n_pos,
        n_neg=run_args.validation_samples_per_task - n_pos,
        seed=run_args.validation_seed,
    )
    return [EvalSample(i.sample_id, i.task, i.label, i.spectrum) for i in items], "synthetic"


def real_validation_samples(run_args: RunArguments) -> list[Any]:
    """Up to ``validation_samples_per_task`` real spectra per task (positives first), or []
    when the corpus cache is not there."""
    from agent.evaluation import EvalSample

    try:
        from agent.real_corpus import CorpusUnavailable, load_corpus
    except ImportError:
        return []
    try:
        corpus = load_corpus("validation")
    except (CorpusUnavailable, OSError) as error:
        logger.info("real validation split unavailable (%s); using SpecVI-mini", error)
        return []
    samples = []
    for task in run_args.validation_tasks:
        labelled = [(entry, spectrum, entry.label(task)) for entry, spectrum in corpus]
        chosen = sorted(
            (row for row in labelled if row[2] is not None), key=lambda row: row[2] != "YES"
        )[: run_args.validation_samples_per_task]
        samples.extend(
            EvalSample(entry.id, task, label, spectrum) for entry, spectrum, label in chosen
        )
    if not any(sample.label == "YES" for sample in samples):
        return []  # F1 of the positive class needs positives
    return samples


def final_metrics(trainer: Any) -> dict[str, float]:
    merged: dict[str, float] = {}
    for entry in trainer.state.log_history:
        merged.update(canonical_metrics(entry))
    return merged


def _model_path(model_args: ModelArguments) -> Path:
    if not model_args.model_name_or_path:
        raise ValueError("model_name_or_path is required: a local Qwen2.5-VL checkpoint directory")
    path = Path(model_args.model_name_or_path)
    if not path.is_dir():
        raise FileNotFoundError(
            f"model_name_or_path {str(path)!r} is not a local checkpoint directory"
        )
    return path


# --- SFT ---------------------------------------------------------------------------------------


@dataclass
class SFTRun:
    trainer: Any
    processor: Any
    data: SFTData
    sink: MetricsSink
    sources: dict[str, Any]


def collect_trajectories(data_args: DataArguments) -> tuple[list[Trajectory], dict[str, Any]]:
    """The trajectories named by ``data_args`` and a JSON-safe description of where they came from."""
    from agent.formats import load_sharegpt_file

    trajectories: list[Trajectory] = []
    for path in data_args.trajectories:
        trajectories.extend(load_trajectories_jsonl(Path(path)))
    for path in data_args.sharegpt:
        trajectories.extend(load_sharegpt_file(Path(path)))
    if data_args.smoke_tasks:
        trajectories.extend(
            smoke_trajectories(
                data_args.smoke_tasks, samples_per_task=data_args.smoke_samples_per_task
            )
        )
    if not trajectories:
        raise TrainingDataError("no SFT data: set trajectories, sharegpt or smoke_tasks")
    sources = {
        "trajectories": list(data_args.trajectories),
        "sharegpt": list(data_args.sharegpt),
        "smoke_tasks": list(data_args.smoke_tasks),
    }
    if not data_args.use_tool:
        trajectories = [without_tool(trajectory) for trajectory in trajectories]
        sources["use_tool"] = False
    return trajectories, sources


def without_tool(trajectory: Trajectory) -> Trajectory:
    """The no-tool ablation's demonstration (paper Table 4 #4): the no-tool prompt, I0 and the
    trajectory's final answer turn only; trajectories without an answer are kept as they are."""
    from agent.rollout import NO_TOOL_PROMPT_NOTE

    if not trajectory.steps or trajectory.answer is None:
        return trajectory
    data = trajectory.to_dict()
    data["user_prompt"] = trajectory.user_prompt + NO_TOOL_PROMPT_NOTE
    last = dict(data["steps"][-1])
    last["index"] = 0
    data["steps"] = [last]
    data["meta"] = {**trajectory.meta, "use_tool": False}
    result = Trajectory.from_dict(data)
    result.finalize(trajectory.stop_reason)
    return result


def build_sft_run(
    model_args: ModelArguments,
    data_args: DataArguments,
    run_args: RunArguments,
    training_args: SpecvetSFTConfig,
    *,
    trajectories: list[Trajectory] | None = None,
    sink: MetricsSink | None = None,
) -> SFTRun:
    """A ready SFTTrainer on ``trajectories`` (default: those ``data_args`` names)."""
    from trl import SFTTrainer

    if trajectories is None:
        trajectories, sources = collect_trajectories(data_args)
    else:
        sources = {"in_memory": len(trajectories)}
    processor = load_training_processor(model_args)
    data = build_sft_dataset(trajectories, processor, max_length=data_args.max_sequence_length)
    logger.info(
        "SFT rows: %d kept, %d dropped over %s tokens",
        data.report.rows,
        data.report.n_dropped,
        data.report.max_length,
    )
    sink = sink or metrics_sink(run_args, training_args.output_dir)
    run_name = training_args.run_name or Path(training_args.output_dir or "sft").name
    trainer = SFTTrainer(
        model=load_model(model_args),
        args=training_args,
        train_dataset=data.dataset,
        processing_class=processor,
        peft_config=lora_config(model_args),
        callbacks=run_callbacks(
            run_args, processor, sink, stage="sft", run_name=run_name, use_tool=data_args.use_tool
        ),
    )
    return SFTRun(trainer, processor, data, sink, sources)


def save_sft_run(
    run: SFTRun,
    model_args: ModelArguments,
    data_args: DataArguments,
    run_args: RunArguments,
    training_args: SpecvetSFTConfig,
) -> Path:
    """Save the trained model with its lineage into ``training_args.output_dir``."""
    lineage = new_lineage(
        stage="sft",
        base_model=str(model_args.model_name_or_path),
        dataset_version=run.data.report.version,
        dataset={**run.data.report.as_dict(), "sources": run.sources},
        config=config_to_dict(model_args, data_args, run_args, training_args),
        metrics=final_metrics(run.trainer),
    )
    return save_trained(run.trainer, run.processor, training_args.output_dir, lineage)


def main(
    model_args: ModelArguments,
    data_args: DataArguments,
    run_args: RunArguments,
    training_args: SpecvetSFTConfig,
) -> Path:
    run = build_sft_run(model_args, data_args, run_args, training_args)
    run.trainer.train()
    path = save_sft_run(run, model_args, data_args, run_args, training_args)
    logger.info("SFT checkpoint saved to %s", path)
    return path


def parse_args(args: list[str] | None = None) -> tuple[Any, ...]:
    return parse_config((ModelArguments, DataArguments, RunArguments, SpecvetSFTConfig), args)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    main(*parse_args())
