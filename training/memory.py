"""Memory arithmetic for one training process, checked before the model is loaded.

Per GPU, in GiB (2**30 bytes), from the checkpoint's ``config.json`` (parameters counted on the
meta device, nothing allocated) and the run's settings:

- weights: parameters x bytes of the load dtype (fp32 master weights: 4 B; LoRA: the frozen
  base in its dtype plus fp32 adapters). The frozen vision tower is loaded in that dtype too, so
  with fp32 master weights it sits in fp32 (2.5 GiB for 7B): reported as ``vision_tower_gib``,
  a part of ``weights_gib``;
- autocast copies: with fp32 weights and bf16/fp16 autocast, ``torch.autocast`` casts every
  trainable weight a linear layer uses to 2 B and keeps the copy (its weight cache, and autograd
  saves it for the backward pass) until the step's forward and backward are done: trainable
  parameters of linear layers x 2 B (14.2 GiB for a 7B with the vision tower frozen). Frozen
  weights are cast per operation and freed at once, so they add nothing. None under pure
  bf16/fp16 weights or ZeRO-3/FSDP (their gathered weights are already bf16);
- gradients and AdamW states: trainable parameters x (4 + 8) B in fp32 (x (2 + 4) B in bf16);
  under ZeRO-3/FSDP all of it is 16 B per parameter divided by the number of processes
  (bf16 weights and gradients, fp32 master copy and two AdamW states);
- the GRPO reference model (``beta`` > 0 without LoRA): a second copy of the weights;
- vLLM colocate: ``vllm_gpu_memory_utilization`` x the GPU's memory;
- the logit pass: TRL 1.16 scores tokens through its fused LM head
  (``trl.trainer.utils.add_fused_lm_head``), in tiles of 4,096 tokens x 32,768 vocabulary
  entries in fp32, recomputed in the backward pass: 0.5 GiB per tile whatever the length. The
  full logits (batch x tokens x vocabulary x 4 B) are never materialised; the figure they would
  take is reported as ``logits_unfused_gib``;
- activations, roughly: with gradient checkpointing one bf16 hidden state per layer plus one
  layer's intermediates (10 x hidden + 3 x intermediate values per token), for
  ``per_device_train_batch_size`` sequences of the longest length the run allows.

A run whose sum exceeds the GPU is refused with the figures and what would make it fit.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

GIB = 1024**3
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
# trl.kernels.chunked_logprob.TOKEN_CHUNK_SIZE and trl.trainer.utils._CHUNKED_LOGPROB_CHUNK_SIZE
FUSED_HEAD_TOKENS = 4096
FUSED_HEAD_VOCAB = 32768
# A Spec-o3 GRPO prompt: system prompt, T0 and I0 (issue 24: 5,355 tokens, 322 of them image).
GRPO_PROMPT_TOKENS = 5400


class MemoryPlanError(ValueError):
    """A run whose training state does not fit the GPU it would run on; ``estimate`` holds the
    figures the refusal was worked out from."""

    def __init__(self, message: str, estimate: MemoryEstimate | None = None) -> None:
        super().__init__(message)
        self.estimate = estimate


@dataclass(frozen=True)
class ParameterCount:
    total: int
    trainable: int
    lora: bool
    hidden_size: int
    intermediate_size: int
    num_layers: int
    vocab_size: int
    # Trainable parameters autocast keeps a 2-B copy of (linear layers' weights and biases).
    autocast_parameters: int = 0
    # Parameters of the vision tower (``visual.*``), trainable or not.
    vision_parameters: int = 0


@dataclass(frozen=True)
class MemoryEstimate:
    parameters: int
    trainable: int
    weights_gib: float
    gradients_gib: float
    optimizer_gib: float
    autocast_gib: float
    reference_gib: float
    vllm_gib: float
    logits_gib: float
    logits_unfused_gib: float
    activations_gib: float
    sequence_tokens: int
    processes: int
    sharded: bool
    device_gib: float | None
    vision_tower_gib: float = 0.0  # part of weights_gib: the vision tower in the load dtype

    @property
    def total_gib(self) -> float:
        return (
            self.weights_gib
            + self.gradients_gib
            + self.optimizer_gib
            + self.autocast_gib
            + self.reference_gib
            + self.vllm_gib
            + self.logits_gib
            + self.activations_gib
        )

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "total_gib": round(self.total_gib, 2)}

    def summary(self) -> str:
        weights = f"weights {self.weights_gib:.1f}"
        if self.vision_tower_gib:
            weights += f" (vision tower {self.vision_tower_gib:.1f} of it)"
        parts = [
            weights,
            f"gradients {self.gradients_gib:.1f}",
            f"AdamW states {self.optimizer_gib:.1f}",
        ]
        if self.autocast_gib:
            parts.append(f"autocast bf16 copies {self.autocast_gib:.1f}")
        if self.reference_gib:
            parts.append(f"reference model {self.reference_gib:.1f}")
        if self.vllm_gib:
            parts.append(f"vLLM colocate {self.vllm_gib:.1f}")
        parts += [
            f"logit pass {self.logits_gib:.1f} (fused LM head; full logits would take "
            f"{self.logits_unfused_gib:.1f})",
            f"activations ~{self.activations_gib:.1f}",
        ]
        device = f" of {self.device_gib:.1f} GiB" if self.device_gib else ""
        return (
            f"{self.parameters / 1e9:.2f} B parameters, {self.trainable / 1e9:.3f} B trainable, "
            f"{self.sequence_tokens} tokens per sequence, {self.processes} process(es)"
            f"{' sharded' if self.sharded else ''}: " + " + ".join(parts) + f" = "
            f"{self.total_gib:.1f} GiB per GPU{device}"
        )


def count_parameters(
    checkpoint: str | Path,
    *,
    freeze_pattern: str | None,
    lora_targets: list[str] | None = None,
    lora_rank: int = 0,
    lora_exclude: str | None = None,
) -> ParameterCount:
    """Parameters of the checkpoint's architecture (meta device) and how many train: all but
    ``freeze_pattern``'s, or for LoRA ``rank x (in + out)`` per adapted linear layer."""
    import torch
    from transformers import AutoConfig, Qwen2_5_VLForConditionalGeneration

    config = AutoConfig.from_pretrained(str(checkpoint))
    with torch.device("meta"):
        model = Qwen2_5_VLForConditionalGeneration(config)
    total = sum(parameter.numel() for parameter in model.parameters())
    if lora_targets:
        exclude = re.compile(lora_exclude) if lora_exclude else None
        trainable = sum(
            lora_rank * (module.in_features + module.out_features)
            for name, module in model.named_modules()
            if isinstance(module, torch.nn.Linear)
            and name.rsplit(".", 1)[-1] in lora_targets
            and not (exclude and exclude.fullmatch(name))
        )
    else:
        frozen = re.compile(freeze_pattern) if freeze_pattern else None
        trainable = sum(
            parameter.numel()
            for name, parameter in model.named_parameters()
            if not (frozen and frozen.fullmatch(name))
        )
    text = config.get_text_config()
    # LoRA: every adapter is a linear layer; full fine-tuning: the trainable linear layers
    cast = trainable if lora_targets else _linear_parameters(model, freeze_pattern)
    return ParameterCount(
        total,
        trainable,
        bool(lora_targets),
        int(text.hidden_size),
        int(text.intermediate_size),
        int(text.num_hidden_layers),
        int(text.vocab_size),
        autocast_parameters=cast,
        vision_parameters=sum(
            parameter.numel() for name, parameter in model.named_parameters() if "visual" in name
        ),
    )


def _linear_parameters(model: Any, freeze_pattern: str | None) -> int:
    """Weights and biases of the linear layers outside ``freeze_pattern``, each counted once (a
    tied LM head's weight is the embedding's, which the head's matrix product casts)."""
    import torch

    frozen = re.compile(freeze_pattern) if freeze_pattern else None
    names = {id(parameter): name for name, parameter in model.named_parameters()}
    seen: dict[int, int] = {}
    for module in model.modules():
        if isinstance(module, torch.nn.Linear):
            for parameter in module.parameters(recurse=False):
                name = names.get(id(parameter), "")
                if not (frozen and frozen.fullmatch(name)):
                    seen[id(parameter)] = parameter.numel()
    return sum(seen.values())


def estimate_memory(
    count: ParameterCount,
    *,
    load_dtype: str,
    batch_size: int,
    sequence_tokens: int,
    gradient_checkpointing: bool,
    processes: int = 1,
    sharded: bool = False,
    reference_model: bool = False,
    vllm_share: float = 0.0,
    device_gib: float | None = None,
    autocast: bool = False,
) -> MemoryEstimate:
    """Per-GPU memory of a run (see the module docstring for each term); ``autocast``: the
    run computes in bf16/fp16 autocast (``bf16: true``)."""
    weight_bytes = DTYPE_BYTES.get(load_dtype, 4)
    casts = 0.0
    if sharded:
        weights = count.total * 2 / processes
        vision = count.vision_parameters * 2 / processes
        gradients = count.trainable * 2 / processes
        optimizer = count.trainable * 12 / processes
    elif count.lora:
        weights = count.total * weight_bytes + count.trainable * 4
        vision = count.vision_parameters * weight_bytes
        gradients = count.trainable * 4
        optimizer = count.trainable * 8
        casts = count.autocast_parameters * 2 if autocast else 0  # the fp32 adapters
    else:
        weights = count.total * weight_bytes
        vision = count.vision_parameters * weight_bytes
        gradients = count.trainable * weight_bytes
        optimizer = count.trainable * 2 * weight_bytes
        casts = count.autocast_parameters * 2 if autocast and weight_bytes > 2 else 0
    reference = weights if reference_model and not count.lora else 0.0
    tokens = batch_size * sequence_tokens
    logits = min(tokens, FUSED_HEAD_TOKENS) * min(count.vocab_size, FUSED_HEAD_VOCAB) * 4
    logits_unfused = tokens * count.vocab_size * 4
    one_layer = tokens * (10 * count.hidden_size + 3 * count.intermediate_size) * 2
    if gradient_checkpointing:
        activations = tokens * count.hidden_size * 2 * count.num_layers + one_layer
    else:
        activations = one_layer * count.num_layers
    vllm = vllm_share * device_gib * GIB if device_gib else 0.0
    return MemoryEstimate(
        parameters=count.total,
        trainable=count.trainable,
        weights_gib=weights / GIB,
        gradients_gib=gradients / GIB,
        optimizer_gib=optimizer / GIB,
        autocast_gib=casts / GIB,
        reference_gib=reference / GIB,
        vllm_gib=vllm / GIB,
        logits_gib=2 * logits / GIB,  # the forward tile and the backward's recomputed tile
        logits_unfused_gib=logits_unfused / GIB,
        activations_gib=activations / GIB,
        sequence_tokens=sequence_tokens,
        processes=processes,
        sharded=sharded,
        device_gib=device_gib,
        vision_tower_gib=vision / GIB,
    )


def check_fits(estimate: MemoryEstimate, *, use_vllm: bool = False) -> None:
    """Raise MemoryPlanError naming the figures and what would fit, when the run does not."""
    if estimate.device_gib is None or estimate.total_gib <= estimate.device_gib:
        return
    state_per_parameter = 16  # bytes: ZeRO-3's weights, gradients, master copy, AdamW states
    other = estimate.total_gib - (
        estimate.weights_gib
        + estimate.gradients_gib
        + estimate.optimizer_gib
        + estimate.autocast_gib  # ZeRO-3's gathered weights are bf16 already
    )
    room = estimate.device_gib - other
    suggestions = []
    if not estimate.sharded:
        suggestions.append(
            "use_lora: true (the frozen base stays in bf16, only the adapters carry fp32 state)"
        )
        if room > 0:
            needed = -(-estimate.parameters * state_per_parameter // int(room * GIB))
            suggestions.append(
                f"ZeRO-3 on at least {max(needed, 2)} GPUs "
                "(training/configs/accelerate/deepspeed_zero3.yaml)"
            )
        suggestions.append("ZeRO-3 with optimizer offload to CPU memory")
    else:
        suggestions.append("more GPUs, or ZeRO-3 optimizer offload to CPU memory")
    suggestions.append(
        "shorter sequences or a smaller per_device_train_batch_size (activations "
        f"{estimate.activations_gib:.1f} GiB)"
    )
    if use_vllm and estimate.vllm_gib:
        suggestions.append(
            f"a smaller vllm_gpu_memory_utilization (vLLM takes {estimate.vllm_gib:.1f} GiB)"
        )
    raise MemoryPlanError(
        "this run does not fit the GPU: "
        + estimate.summary()
        + ". Options: "
        + "; ".join(suggestions)
        + ". Set gpu_memory_gib to plan for another card, or check_memory: false to try anyway.",
        estimate,
    )


def device_memory_gib() -> float | None:
    """The memory of the first CUDA device in GiB, or None without one."""
    import torch

    if not torch.cuda.is_available():
        return None
    return float(torch.cuda.get_device_properties(0).total_memory) / GIB
