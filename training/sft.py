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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.splits import SplitMembers
from agent.trajectory import Trajectory
from training.callbacks import MetricsSink, attach_trainer
from training.config import (
    DataArguments,
    ModelArguments,
    RunArguments,
    SpecvetSFTConfig,
    parse_config,
)
from training.data import (
    SFTData,
    TrainingDataError,
    build_sft_dataset,
    load_trajectories_jsonl,
    smoke_trajectories,
)
from training.inputs import DATASET, SPECVET, check_choice, record, with_specvet_prompts
from training.memory import MemoryEstimate
from training.precision import PrecisionPlan
from training.run import (
    check_validation_disjoint,
    load_model,
    load_training_processor,
    lora_config,
    metrics_sink,
    plan_run,
    run_callbacks,
    run_name,
    save_run,
)

logger = logging.getLogger(__name__)
# --- SFT ---------------------------------------------------------------------------------------


@dataclass
class SFTRun:
    trainer: Any
    processor: Any
    data: SFTData
    sink: MetricsSink
    sources: dict[str, Any]
    precision: PrecisionPlan | None = None
    memory: MemoryEstimate | None = None
    recipe: dict[str, Any] = field(default_factory=dict)
    training_spectra: SplitMembers | None = None  # written beside the checkpoint


def collect_trajectories(data_args: DataArguments) -> tuple[list[Trajectory], dict[str, Any]]:
    """The trajectories named by ``data_args`` and a JSON-safe description of where they came from."""
    from agent.formats import cold_start_warnings, load_sharegpt_file

    trajectories: list[Trajectory] = []
    for path in data_args.trajectories:
        trajectories.extend(load_trajectories_jsonl(Path(path)))
    cold_start: list[Trajectory] = []
    for path in data_args.sharegpt:
        cold_start.extend(load_sharegpt_file(Path(path)))
    if check_choice(data_args.input_distribution) == SPECVET:
        # One distribution per run: imported demonstrations get specvet's prompts (training.inputs).
        cold_start = [with_specvet_prompts(trajectory) for trajectory in cold_start]
    trajectories.extend(cold_start)
    if data_args.smoke_tasks:
        trajectories.extend(
            smoke_trajectories(
                data_args.smoke_tasks, samples_per_task=data_args.smoke_samples_per_task
            )
        )
    if not trajectories:
        raise TrainingDataError("no SFT data: set trajectories, sharegpt or smoke_tasks")
    sources: dict[str, Any] = {
        "trajectories": list(data_args.trajectories),
        "sharegpt": list(data_args.sharegpt),
        "smoke_tasks": list(data_args.smoke_tasks),
    }
    if cold_start and data_args.input_distribution == DATASET:
        # Recorded with the run: its rows' prompts and pictures differ from specvet's.
        sources["cold_start_warnings"] = cold_start_warnings(cold_start)
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
    sources.update(record(data_args.input_distribution))
    spectra = SplitMembers.of_trajectories("SFT data", trajectories)
    check_validation_disjoint(run_args, spectra)
    precision, memory = plan_run(model_args, data_args, run_args, training_args, stage="sft")
    processor = load_training_processor(model_args)
    data = build_sft_dataset(trajectories, processor, max_length=data_args.max_sequence_length)
    logger.info(
        "SFT rows: %d kept, %d dropped over %s tokens",
        data.report.rows,
        data.report.n_dropped,
        data.report.max_length,
    )
    sink = sink or metrics_sink(run_args, training_args.output_dir)
    trainer = SFTTrainer(
        model=load_model(model_args, precision),
        args=training_args,
        train_dataset=data.dataset,
        processing_class=processor,
        peft_config=lora_config(model_args),
        callbacks=run_callbacks(
            run_args,
            processor,
            sink,
            stage="sft",
            run_name=run_name(training_args, "sft"),
            use_tool=data_args.use_tool,
        ),
    )
    attach_trainer(trainer)
    return SFTRun(
        trainer, processor, data, sink, sources, precision, memory, training_spectra=spectra
    )


def save_sft_run(
    run: SFTRun,
    model_args: ModelArguments,
    data_args: DataArguments,
    run_args: RunArguments,
    training_args: SpecvetSFTConfig,
) -> Path:
    """Save the trained model with its lineage into ``training_args.output_dir``."""
    return save_run(
        run,
        model_args,
        data_args,
        run_args,
        training_args,
        stage="sft",
        dataset_version=run.data.report.version,
        dataset={**run.data.report.as_dict(), "sources": run.sources},
    )


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
