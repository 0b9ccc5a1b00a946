"""Agentic GRPO of the inspection agent on label-only spectra (paper section 3.3).

TRL ``GRPOTrainer`` with ``environment_factory=SpectrumInspectionEnv``: each rollout calls the
agent's own ``spectral_visualization_tool`` (plots come back as images), at most
``max_tool_calling_iterations`` times; tool-result tokens (image tokens included) are masked out
of the loss by TRL's ``tool_mask``. The reward is paper eq. 3 (``--reward spec_o3``, alpha 0.2)
or SPECTRA's multi-objective reward (``--reward spectra``), both read with ``agent.parsing``.

Two fixes from ml_path.md section 2 are applied here: the tokenizer gets TRL's Qwen3 response
template (Qwen2.5 writes the same ``<tool_call>{json}</tool_call>``), and the processor carries the
project chat template, which passes ``supports_tool_calling`` and renders tool messages exactly
like the user tool-response turns of SFT trajectories.

# GPU: SpecVI-mini label-only rows from an SFT checkpoint, SPECTRA hyperparameters with LoRA
```bash
python -m training.grpo --config training/configs/grpo_gpu.yaml --preset spectra \\
    --model_name_or_path runs/sft-7b --specvi_mini_tasks CV CS SS MG WD --output_dir runs/grpo-7b
```

# CPU smoke run on the tiny random model
```bash
python -m training.tiny_model /tmp/specvet-tiny-qwen25vl
python -m training.grpo --config training/configs/grpo_cpu_tiny.yaml
```
"""

from __future__ import annotations

import copy
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from training.callbacks import MetricsSink
from training.checkpoint import new_lineage, save_checkpoint
from training.config import (
    DataArguments,
    ModelArguments,
    RunArguments,
    SpecvetGRPOConfig,
    config_to_dict,
    parse_config,
)
from training.data import (
    LabelledSpectrum,
    TrainingDataError,
    build_rl_dataset,
    dataset_version,
    specvi_mini_items,
    verl_parquet_items,
)
from training.environment import SpectrumInspectionEnv
from training.rewards import SpectraRewardWeights, build_reward
from training.sft import (
    final_metrics,
    load_model,
    load_training_processor,
    lora_config,
    metrics_sink,
    run_callbacks,
)

logger = logging.getLogger(__name__)


@dataclass
class GRPORun:
    trainer: Any
    processor: Any
    dataset: Any
    sink: MetricsSink
    sources: dict[str, Any]


def collect_items(data_args: DataArguments) -> tuple[list[LabelledSpectrum], dict[str, Any]]:
    """The label-only items ``data_args`` names and a description of their sources."""
    items: list[LabelledSpectrum] = []
    if data_args.specvi_mini_tasks:
        items.extend(
            specvi_mini_items(
                data_args.specvi_mini_tasks,
                split=data_args.specvi_mini_split,
                n_pos=data_args.specvi_mini_positives,
                n_neg=data_args.specvi_mini_negatives,
                seed=data_args.specvi_mini_seed,
            )
        )
    items.extend(verl_parquet_items(Path(path) for path in data_args.verl_parquet))
    if not items:
        raise TrainingDataError("no GRPO data: set specvi_mini_tasks or verl_parquet")
    sources = {
        "specvi_mini_tasks": list(data_args.specvi_mini_tasks),
        "specvi_mini_split": data_args.specvi_mini_split,
        "verl_parquet": list(data_args.verl_parquet),
    }
    return items, sources


def spectra_weights(args: SpecvetGRPOConfig) -> SpectraRewardWeights:
    return SpectraRewardWeights(
        lambda_correct=args.spectra_lambda_correct,
        lambda_struct=args.spectra_lambda_struct,
        lambda_tool=args.spectra_lambda_tool,
        lambda_term=args.spectra_lambda_term,
        c1=args.spectra_c1,
        c2=args.spectra_c2,
        alpha=args.spectra_alpha,
        beta=args.spectra_beta,
        gamma=args.spectra_gamma,
        eta=args.spectra_eta,
        kappa=args.spectra_kappa,
        scale=args.spectra_scale,
        n_norm=args.spectra_n_norm,
    )


def tool_calling_processor(model_args: ModelArguments) -> Any:
    """The processor with the project template and TRL's Qwen3 response parser (ml_path.md 2)."""
    from trl.chat_template_utils import qwen3_template

    processor = load_training_processor(model_args)
    processor.tokenizer.response_template = copy.deepcopy(qwen3_template)
    return processor


def build_grpo_run(
    model_args: ModelArguments,
    data_args: DataArguments,
    run_args: RunArguments,
    training_args: SpecvetGRPOConfig,
    *,
    items: list[LabelledSpectrum] | None = None,
    sink: MetricsSink | None = None,
) -> GRPORun:
    """A ready GRPOTrainer on ``items`` (default: those ``data_args`` names)."""
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from trl import GRPOTrainer

    if items is None:
        items, sources = collect_items(data_args)
    else:
        sources = {"in_memory": len(items)}
    processor = tool_calling_processor(model_args)
    dataset = build_rl_dataset(items)
    reward = build_reward(
        training_args.reward,
        tokenizer=processor.tokenizer,
        alpha=training_args.reward_alpha,
        max_tool_calls=training_args.max_tool_calling_iterations,
        weights=spectra_weights(training_args),
    )
    sink = sink or metrics_sink(run_args, training_args.output_dir)
    run_name = training_args.run_name or Path(training_args.output_dir or "grpo").name
    trainer = GRPOTrainer(
        model=load_model(model_args),
        reward_funcs=[reward],
        args=training_args,
        train_dataset=dataset,
        processing_class=processor,
        environment_factory=SpectrumInspectionEnv,
        peft_config=lora_config(model_args),
        callbacks=run_callbacks(run_args, processor, sink, stage="grpo", run_name=run_name),
    )
    return GRPORun(trainer, processor, dataset, sink, sources)


def save_grpo_run(
    run: GRPORun,
    model_args: ModelArguments,
    data_args: DataArguments,
    run_args: RunArguments,
    training_args: SpecvetGRPOConfig,
) -> Path:
    """Save the trained model with its lineage into ``training_args.output_dir``."""
    lineage = new_lineage(
        stage="grpo",
        base_model=str(model_args.model_name_or_path),
        dataset_version=dataset_version(run.dataset),
        dataset={"rows": len(run.dataset), "sources": run.sources},
        config=config_to_dict(model_args, data_args, run_args, training_args),
        metrics=final_metrics(run.trainer),
    )
    return save_checkpoint(run.trainer.model, run.processor, training_args.output_dir, lineage)


def main(
    model_args: ModelArguments,
    data_args: DataArguments,
    run_args: RunArguments,
    training_args: SpecvetGRPOConfig,
) -> Path:
    run = build_grpo_run(model_args, data_args, run_args, training_args)
    run.trainer.train()
    path = save_grpo_run(run, model_args, data_args, run_args, training_args)
    logger.info("GRPO checkpoint saved to %s", path)
    return path


def parse_args(args: list[str] | None = None) -> tuple[Any, ...]:
    return parse_config((ModelArguments, DataArguments, RunArguments, SpecvetGRPOConfig), args)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    main(*parse_args())
