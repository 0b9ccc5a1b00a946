"""The run skeleton SFT, GRPO and DPO share: model, processor and LoRA from the model arguments,
the metrics sink and callbacks (validation F1 included), the run's name, and saving the trained
model with its lineage. ``training.sft`` and ``training.grpo`` keep only what differs."""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any, cast

from agent.splits import (
    VALIDATION_SPLIT,
    SplitMembers,
    SplitOverlap,
    check_disjoint,
    save_training_spectra,
    with_base_spectra,
)
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
    config_to_dict,
    launch_layout,
)
from training.data import TrainingDataError, specvi_mini_items
from training.inputs import refuse_mixing
from training.memory import (
    GRPO_PROMPT_TOKENS,
    MemoryEstimate,
    check_fits,
    count_parameters,
    device_memory_gib,
    estimate_memory,
)
from training.precision import PrecisionPlan, checkpoint_dtype, precision_plan, torch_dtype

logger = logging.getLogger(__name__)

METRICS_FILE = "metrics.jsonl"


def plan_run(
    model_args: ModelArguments,
    data_args: DataArguments,
    run_args: RunArguments,
    training_args: Any,
    *,
    stage: str,
) -> tuple[PrecisionPlan, MemoryEstimate]:
    """The run's dtypes (training.precision) and per-GPU memory (training.memory), worked out
    before the model is loaded; raises PrecisionError or MemoryPlanError with the figures."""
    path = _model_path(model_args)
    refuse_mixing(checkpoint=path, chosen=data_args.input_distribution, what=stage.upper())
    processes, sharded = launch_layout()
    sharded = (
        sharded
        or bool(getattr(training_args, "deepspeed", None))
        or bool(getattr(training_args, "fsdp", None))
    )
    count = count_parameters(
        path,
        freeze_pattern=model_args.lora_exclude_modules if model_args.freeze_vision_tower else None,
        lora_targets=list(model_args.lora_target_modules) if model_args.use_lora else None,
        lora_rank=model_args.lora_r,
        lora_exclude=model_args.lora_exclude_modules,
    )
    precision = precision_plan(
        checkpoint=checkpoint_dtype(path),
        requested_dtype=model_args.dtype,
        use_lora=model_args.use_lora,
        sharded=sharded,
        bf16=bool(getattr(training_args, "bf16", False)),
        fp16=bool(getattr(training_args, "fp16", False)),
        trainable_parameters=count.trainable,
    )
    if stage == "grpo":
        sequence = GRPO_PROMPT_TOKENS + int(training_args.max_completion_length or 0)
        colocate = training_args.use_vllm and training_args.vllm_mode == "colocate"
        vllm_share = float(training_args.vllm_gpu_memory_utilization) if colocate else 0.0
        reference = float(training_args.beta) > 0
    else:
        sequence = int(data_args.max_sequence_length or training_args.max_length or 0)
        # DPO keeps a frozen copy of the model for the reference log-probabilities.
        vllm_share, reference = 0.0, stage == "dpo"
    on_gpu = not getattr(training_args, "use_cpu", False)
    estimate = estimate_memory(
        count,
        load_dtype=precision.load_dtype,
        batch_size=int(training_args.per_device_train_batch_size),
        sequence_tokens=sequence,
        gradient_checkpointing=bool(training_args.gradient_checkpointing),
        processes=processes,
        sharded=sharded,
        reference_model=reference,
        vllm_share=vllm_share,
        device_gib=run_args.gpu_memory_gib or (device_memory_gib() if on_gpu else None),
        autocast=precision.compute != "fp32",
    )
    logger.info("%s precision: %s; memory: %s", stage, precision.reason, estimate.summary())
    if run_args.check_memory:
        check_fits(estimate, use_vllm=vllm_share > 0)
    return precision, estimate


def load_model(model_args: ModelArguments, precision: PrecisionPlan | None = None) -> Any:
    """The Qwen2.5-VL model of ``model_args`` in ``precision``'s load dtype (default: the
    requested one), vision tower frozen when asked."""
    from transformers import Qwen2_5_VLForConditionalGeneration

    path = _model_path(model_args)
    dtype = model_args.dtype if precision is None else precision.load_dtype
    model = Qwen2_5_VLForConditionalGeneration.from_pretrained(str(path), dtype=dtype)
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
                gather_zero3=run_args.validation_gather_zero3,
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
        split=VALIDATION_SPLIT,  # never "test": evaluation draws from that one
        n_pos=n_pos,
        n_neg=run_args.validation_samples_per_task - n_pos,
        seed=run_args.validation_seed,
    )
    return [EvalSample(i.sample_id, i.task, i.label, i.spectrum) for i in items], "synthetic"


def check_validation_disjoint(run_args: RunArguments, training: SplitMembers) -> None:
    """Refuse a run whose in-training validation set shares a spectrum (object id or content
    hash) with its training rows, naming them; nothing to check without validation tasks."""
    if not run_args.validation_tasks:
        return
    samples, source = validation_samples(run_args)
    validation = SplitMembers.of_spectra(
        f"in-training validation ({source})", (sample.spectrum for sample in samples)
    )
    refuse_leaks(training, validation)


def refuse_leaks(*sets: SplitMembers) -> None:
    """Raise ``TrainingDataError`` naming the spectra two of ``sets`` share (agent.splits)."""
    try:
        check_disjoint(*sets)
    except SplitOverlap as error:
        raise TrainingDataError(str(error)) from error


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
    samples: list[EvalSample] = []
    for task in run_args.validation_tasks:
        labelled = [(entry, spectrum, entry.label(task)) for entry, spectrum in corpus]
        chosen = sorted(
            (row for row in labelled if row[2] is not None), key=lambda row: row[2] != "YES"
        )[: run_args.validation_samples_per_task]
        samples.extend(
            EvalSample(entry.id, task, cast(str, label), spectrum)
            for entry, spectrum, label in chosen
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


def run_name(training_args: Any, default: str) -> str:
    """The run's name: ``run_name``, else the output directory's name, else ``default``."""
    return training_args.run_name or Path(training_args.output_dir or default).name


def save_run(
    run: Any,
    model_args: ModelArguments,
    data_args: DataArguments,
    run_args: RunArguments,
    training_args: Any,
    *,
    stage: str,
    dataset_version: str,
    dataset: dict[str, Any],
) -> Path:
    """Save ``run``'s trained model with its lineage into ``training_args.output_dir``; weights
    trained in an upcast dtype are written in the checkpoint's own dtype again."""
    config = config_to_dict(model_args, data_args, run_args, training_args)
    config["recipe"] = dict(getattr(run, "recipe", None) or {})
    precision: PrecisionPlan | None = getattr(run, "precision", None)
    memory: MemoryEstimate | None = getattr(run, "memory", None)
    if memory is not None:
        config["recipe"]["memory"] = memory.as_dict()
    if precision is not None:
        config["recipe"]["precision"] = precision.as_dict()
        if precision.upcast:
            run.trainer.model.to(torch_dtype(precision.save_dtype))
    lineage = new_lineage(
        stage=stage,
        base_model=str(model_args.model_name_or_path),
        dataset_version=dataset_version,
        dataset=dataset,
        config=config,
        metrics=final_metrics(run.trainer),
    )
    out = save_trained(run.trainer, run.processor, cast(str, training_args.output_dir), lineage)
    spectra: SplitMembers | None = getattr(run, "training_spectra", None)
    if spectra is not None and run.trainer.args.should_save:
        # What an evaluation of this checkpoint must not score (base's spectra included).
        save_training_spectra(out, with_base_spectra(spectra, str(model_args.model_name_or_path)))
    return out
