"""Agentic GRPO of the inspection agent on label-only spectra (paper section 3.3).

TRL ``GRPOTrainer`` with ``environment_factory=SpectrumInspectionEnv``: each rollout calls the
agent's own ``spectral_visualization_tool`` (plots come back as images), at most
``max_tool_calling_iterations`` times; tool-result tokens (image tokens included) are masked out
of the loss by TRL's ``tool_mask``. The reward is paper eq. 3 (``--reward spec_o3``, alpha 0.2)
or SPECTRA's multi-objective reward (``--reward spectra``), both read with ``agent.parsing``.

Fixes applied here: the processor carries the project chat template, which passes
``supports_tool_calling`` and renders tool messages exactly like the user tool-response turns of
SFT trajectories (ml_path.md section 2); the tokenizer's response parser is replaced by the
agent's (``training.environment``), so TRL's tool loop follows ``agent.rollout_rules`` like the
inspection loop does; and ``SpecvetGRPOTrainer`` gives logged completions one schema, since TRL
1.16 writes a conversation whose tool turns hold content blocks and whose assistant turns hold
text straight to parquet, which pyarrow refuses (``ArrowInvalid: cannot mix list and non-list``).

# GPU: SpecVI-mini label-only rows from an SFT checkpoint, SPECTRA hyperparameters with LoRA
```bash
python -m training.grpo --config training/configs/grpo_gpu.yaml --preset spectra \\
    --model_name_or_path runs/sft-7b --specvi_mini_tasks CV CS SS MG WD --output_dir runs/grpo-7b
```

# GPU: 8 GPUs, full fine-tuning under ZeRO-3, rollouts on colocated vLLM (grpo_gpu.yaml)
```bash
accelerate launch --config_file training/configs/accelerate/deepspeed_zero3.yaml -m training.grpo \\
    --config training/configs/grpo_gpu.yaml --model_name_or_path runs/sft-7b \\
    --specvi_mini_tasks CV CS SS MG WD --output_dir runs/grpo-7b
```

# CPU smoke run on the tiny random model
```bash
python -m training.tiny_model /tmp/specvet-tiny-qwen25vl
python -m training.grpo --config training/configs/grpo_cpu_tiny.yaml
```
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from agent.render import renderer_info
from agent.splits import HELD_OUT_SPLITS, SplitMembers
from agent.tool import IMAGE_SIZE
from agent.trajectory import IMAGE_PLACEHOLDER
from training.callbacks import MetricsSink, attach_trainer
from training.config import (
    DataArguments,
    ModelArguments,
    RunArguments,
    SpecvetGRPOConfig,
    check_generation_setup,
    parse_config,
)
from training.data import (
    LabelledSpectrum,
    TrainingDataError,
    VerlInputs,
    build_rl_dataset,
    dataset_version,
    specvi_mini_items,
    verl_parquet_items,
)
from training.environment import (
    TURN_ARGUMENT,
    environment_factory,
    install_agent_response_parser,
)
from training.inputs import DATASET, check_choice, record
from training.memory import MemoryEstimate
from training.precision import PrecisionPlan
from training.rewards import SpectraRewardWeights, build_reward
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
from training.vllm_colocate import colocate_engine, colocate_engine_kwargs

logger = logging.getLogger(__name__)


@dataclass
class GRPORun:
    trainer: Any
    processor: Any
    dataset: Any
    sink: MetricsSink
    sources: dict[str, Any]
    precision: PrecisionPlan | None = None
    memory: MemoryEstimate | None = None
    recipe: dict[str, Any] = field(default_factory=dict)
    training_spectra: SplitMembers | None = None  # written beside the checkpoint


def collect_items(data_args: DataArguments) -> tuple[list[LabelledSpectrum], dict[str, Any]]:
    """The label-only items ``data_args`` names and a description of their sources."""
    items: list[LabelledSpectrum] = []
    if data_args.specvi_mini_tasks and data_args.specvi_mini_split in HELD_OUT_SPLITS:
        raise TrainingDataError(
            f"specvi_mini_split {data_args.specvi_mini_split!r} is held out (validation and "
            "evaluation draw from it); GRPO trains on another split, such as 'train'"
        )
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
    verl = VerlInputs()
    as_shipped = check_choice(data_args.input_distribution) == DATASET
    items.extend(
        verl_parquet_items(
            (Path(path) for path in data_args.verl_parquet), verl, keep_opening=as_shipped
        )
    )
    if not items:
        raise TrainingDataError("no GRPO data: set specvi_mini_tasks or verl_parquet")
    if not as_shipped and (verl.other_system_prompt or verl.other_user_prompt):
        logger.warning(
            "%d of %d verl rows carry their own prompt (system: %d, T0: %d); GRPO trains on "
            "specvet's prompt and re-rendered I0, the ones inference uses",
            max(verl.other_system_prompt, verl.other_user_prompt),
            verl.rows,
            verl.other_system_prompt,
            verl.other_user_prompt,
        )
    sources = {
        "specvi_mini_tasks": list(data_args.specvi_mini_tasks),
        "specvi_mini_split": data_args.specvi_mini_split,
        "verl_parquet": list(data_args.verl_parquet),
        # What the policy is shown, so a checkpoint is evaluated with the inputs it learnt on.
        "prompt": "each verl row's own; specvet's for SpecVI-mini rows"
        if as_shipped
        else "specvet (agent.inspection_tasks system_prompt and build_prompt)",
        "initial_image": "each verl row's own; specvet's for SpecVI-mini rows"
        if as_shipped
        else "re-rendered by specvet's tool for every row",
        "renderer": renderer_info(IMAGE_SIZE),
        **verl.as_sources(),
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
    """The processor with the project template and the agent's response parser."""
    processor = load_training_processor(model_args)
    install_agent_response_parser(processor.tokenizer)
    return processor


def loggable_messages(messages: Any) -> Any:
    """A conversation in one schema pyarrow can store: every message becomes ``role``,
    ``content`` (text, ``<image>`` where a picture was) and ``tool_calls`` (a list, arguments as
    JSON text; ``{}`` for the agent's calls, whose whole turn is already the content)."""
    if not isinstance(messages, list):
        return messages
    rows = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            content = "".join(
                IMAGE_PLACEHOLDER if part.get("type") == "image" else str(part.get("text", ""))
                for part in content
            )
        calls = []
        for call in message.get("tool_calls") or []:
            function = call.get("function", call)
            arguments = function.get("arguments") or {}
            if isinstance(arguments, dict) and TURN_ARGUMENT in arguments:
                arguments = {}
            text = arguments if isinstance(arguments, str) else json.dumps(arguments)
            calls.append(
                {
                    "type": "function",
                    "function": {"name": str(function.get("name", "")), "arguments": text},
                }
            )
        rows.append(
            {
                "role": str(message.get("role", "")),
                "content": "" if content is None else str(content),
                "tool_calls": calls,
            }
        )
    return rows


def equal_rows(values: Any) -> Any:
    """Per row of a 2-D float tensor: whether its non-NaN entries (at least one) are all exactly
    equal."""
    import torch

    scored = ~torch.isnan(values)
    low = torch.where(scored, values, torch.inf).amin(dim=1)
    high = torch.where(scored, values, -torch.inf).amax(dim=1)
    return scored.any(dim=1) & (low == high)


def trl_std_is_zero(rewards: Any, group_size: int, scale_rewards: str) -> Any:
    """TRL 1.16's per-rollout ``is_std_zero`` (``sum_then_normalize``), computed as it does."""
    import torch
    from trl.trainer.utils import nanstd

    if scale_rewards == "batch":
        std = nanstd(rewards).expand_as(rewards) if rewards.numel() > 1 else None
    elif group_size > 1:
        std = nanstd(rewards.view(-1, group_size), dim=1).repeat_interleave(group_size, dim=0)
    else:
        std = None
    std = torch.zeros_like(rewards) if std is None else std
    return torch.isclose(std, torch.zeros_like(std))


def _grpo_trainer_class() -> type:
    from trl import GRPOTrainer

    class SpecvetGRPOTrainer(GRPOTrainer):
        """GRPOTrainer with three TRL 1.16 fixes.

        - Completion logs (``OUTPUT_DIR/completions/*.parquet``) get one message schema.
        - With ``environment_factory`` the prompt's ``pixel_values``/``image_grid_thw`` come back
          as nested lists; a tool round in which no rollout of the rank has shown a plot yet
          (all malformed or refused) then crashes in ``split_pixel_values_by_grid``
          (``'list' object has no attribute 'prod'``). They are made tensors here.
        - A group whose rewards are all equal gets advantage exactly 0 and counts in
          ``frac_reward_zero_std``. TRL takes the group's mean and std in float32; for a reward
          float32 cannot hold (eq. 3's -0.2 and 0.8) and a group of 7-39 the mean is one ulp off,
          so the std (~1.6e-8) passes ``isclose``'s 1e-8 and every rollout of the group gets
          ulp / (ulp + 1e-4): +1.5e-4 for an all-wrong group, pushing toward the collapsed
          answer. Groups with different rewards keep TRL's advantages bit for bit.
        """

        _scored_rewards: Any = None

        def _calculate_rewards(self, *args: Any, **kwargs: Any) -> Any:
            # Every process's rewards (TRL gathers them), the input of the group statistics.
            self._scored_rewards = super()._calculate_rewards(*args, **kwargs)
            return self._scored_rewards

        def _generate_and_score_completions(self, inputs: list) -> dict:
            output = super()._generate_and_score_completions(inputs)
            if self.multi_objective_aggregation == "sum_then_normalize":
                self._zero_equal_groups(output)
            return output

        def _zero_equal_groups(self, output: dict) -> None:
            import torch

            per_func = self._scored_rewards
            mode = "train" if cast(Any, self.model).training else "eval"
            size = cast(int, self.num_generations if mode == "train" else self.num_generations_eval)
            rewards = (per_func * self.reward_weights.to(per_func.device).unsqueeze(0)).nansum(1)
            rewards[torch.isnan(per_func).all(dim=1)] = torch.nan  # TRL's unscorable rows
            equal = equal_rows(rewards.view(-1, size)).repeat_interleave(size, dim=0)
            local = len(output["advantages"])
            start = self.accelerator.process_index * local
            mine = equal[start : start + local].to(output["advantages"].device)
            output["advantages"] = output["advantages"].masked_fill(mine, 0.0)
            logged = cast(Any, self._logs)["advantages"]
            for offset in torch.nonzero(equal).flatten().tolist():
                if len(rewards) - offset <= len(logged):
                    logged[offset - len(rewards)] = 0.0
            if self.scale_rewards == "batch":  # the metric asks whether the batch's std is 0
                equal = equal_rows(rewards.view(1, -1)).expand_as(rewards)
            zero = trl_std_is_zero(rewards, size, self.scale_rewards) | equal
            # Replaces TRL's figure for this batch.
            self._metrics[mode]["frac_reward_zero_std"][-1] = zero.float().mean().item()

        def _tokenize_prompts(self, prompts: list) -> tuple:
            import numpy as np
            import torch

            prompt_ids, images, fields = super()._tokenize_prompts(prompts)
            for key in ("pixel_values", "image_grid_thw"):
                if key in fields and not isinstance(fields[key], torch.Tensor):
                    fields[key] = torch.as_tensor(np.asarray(fields[key]))
            return prompt_ids, images, fields

        def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
            if self.log_completions:
                for key in ("prompt", "completion"):
                    logged = cast(list, self._logs[key])
                    kept = [loggable_messages(messages) for messages in logged]
                    logged.clear()
                    logged.extend(kept)
            super().log(logs, start_time)

    return SpecvetGRPOTrainer


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
    check_generation_setup(training_args)
    if items is None:
        items, sources = collect_items(data_args)
    else:
        sources = {"in_memory": len(items)}
    sources.update(record(data_args.input_distribution))
    spectra = SplitMembers.of_spectra("GRPO data", (item.spectrum for item in items))
    check_validation_disjoint(run_args, spectra)
    precision, memory = plan_run(model_args, data_args, run_args, training_args, stage="grpo")
    processor = tool_calling_processor(model_args)
    dataset = build_rl_dataset(items, use_tool=data_args.use_tool)
    reward = build_reward(
        training_args.reward,
        tokenizer=processor.tokenizer,
        alpha=training_args.reward_alpha,
        max_tool_calls=training_args.max_tool_calling_iterations,
        weights=spectra_weights(training_args),
    )
    sink = sink or metrics_sink(run_args, training_args.output_dir)
    recipe: dict[str, Any] = {"loss": training_args.loss_record()}
    engine: Any = contextlib.nullcontext()
    if training_args.use_vllm and training_args.vllm_mode == "colocate":
        recipe["vllm_colocate"] = colocate_engine_kwargs(
            max_tool_calls=training_args.max_tool_calling_iterations,
            max_model_length=training_args.vllm_max_model_length,
            max_pixels=getattr(processor.image_processor, "max_pixels", None),
        )
        engine = colocate_engine(recipe["vllm_colocate"])
    with engine:
        trainer = _build_trainer(
            model_args,
            data_args,
            run_args,
            training_args,
            precision,
            processor,
            dataset,
            reward,
            sink,
        )
    attach_trainer(trainer)
    return GRPORun(trainer, processor, dataset, sink, sources, precision, memory, recipe, spectra)


def _build_trainer(
    model_args: ModelArguments,
    data_args: DataArguments,
    run_args: RunArguments,
    training_args: SpecvetGRPOConfig,
    precision: Any,
    processor: Any,
    dataset: Any,
    reward: Any,
    sink: MetricsSink,
) -> Any:
    return _grpo_trainer_class()(
        model=load_model(model_args, precision),
        reward_funcs=[reward],
        args=training_args,
        train_dataset=dataset,
        processing_class=processor,
        environment_factory=environment_factory(
            max_tool_calls=_tool_budget(training_args.max_tool_calling_iterations),
            use_tool=data_args.use_tool,
        ),
        peft_config=lora_config(model_args),
        callbacks=run_callbacks(
            run_args,
            processor,
            sink,
            stage="grpo",
            run_name=run_name(training_args, "grpo"),
            use_tool=data_args.use_tool,
        ),
    )


def _tool_budget(iterations: int | None) -> int:
    """The environment's observation budget: TRL's cap on tool rounds (None: no cap)."""
    return sys.maxsize if iterations is None else iterations


def save_grpo_run(
    run: GRPORun,
    model_args: ModelArguments,
    data_args: DataArguments,
    run_args: RunArguments,
    training_args: SpecvetGRPOConfig,
) -> Path:
    """Save the trained model with its lineage into ``training_args.output_dir``."""
    return save_run(
        run,
        model_args,
        data_args,
        run_args,
        training_args,
        stage="grpo",
        dataset_version=dataset_version(run.dataset),
        dataset={"rows": len(run.dataset), "sources": run.sources},
    )


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
