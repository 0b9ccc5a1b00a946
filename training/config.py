"""Training configuration: dataclasses read from a YAML file and the command line (TRL style).

Each script takes ``--config file.yaml`` (any field of any of its dataclasses, plus an optional
``env:`` mapping of environment variables) and command-line flags, which win over the file.
GRPO also takes ``--preset spectra`` (or ``preset: spectra`` in the YAML): SPECTRA's Table 8
values (seed 002), applied before the file, so the file and the flags still override them.

The defaults of :class:`SpecvetSFTConfig` and :class:`SpecvetGRPOConfig` are the GPU recipe:
SFT as the public Spec-o3 cold-start recipe (lr 2e-5, 5 epochs, cosine, 5 % warmup, bf16);
GRPO with the paper's 8 rollouts per prompt and at most 8 tool calls (seed 000 section 4.2).
The CPU test configs in ``training/configs/*_cpu_tiny.yaml`` override them.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from transformers.trainer_utils import SchedulerType
from trl import DPOConfig, GRPOConfig, SFTConfig

LORA_TARGET_MODULES = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
VISION_MODULES_PATTERN = r".*visual.*"
REWARD_NAMES = ("spec_o3", "spectra")
# The GRPO loss aggregations offered, each with what it computes; the default is "dapo".
LOSS_TYPES = {
    "dapo": "token-mean: per-token losses summed over the whole accumulated batch and divided by "
    "its number of trained tokens (verl loss_agg_mode token-mean, the public Spec-o3 recipe's); "
    "every trained token weighs the same, so a long multi-turn rollout is not down-weighted",
    "grpo": "seq-mean-token-mean: each rollout's per-token losses averaged over its own length, "
    "then over rollouts (verl seq-mean-token-mean); length-biased (TRL's docs): it favours short "
    "rollouts with positive advantages and long ones with negative advantages",
}
DEFAULT_LOSS_TYPE = "dapo"
DEFAULT_LOSS_REASON = (
    "the public Spec-o3 recipe aggregates with verl's token-mean, which is TRL's dapo; grpo's "
    "per-rollout mean is length-biased, and tool rollouts differ widely in length (0 to 8 plots)"
)

# SPECTRA Table 8 (seed 002): GRPO, sampling, LoRA and reward values.
PRESETS: dict[str, dict[str, Any]] = {
    "spectra": {
        "num_generations": 8,
        "learning_rate": 1e-6,
        "beta": 0.001,
        "epsilon": 0.2,
        "epsilon_high": 0.4,
        "temperature": 1.0,
        "top_p": 0.95,
        "use_lora": True,
        "lora_r": 64,
        "lora_alpha": 64,
        "reward": "spectra",
    }
}


@dataclass
class ModelArguments:
    """Which checkpoint to train and which of its parameters move.

    > Parameters that control the model

    model_name_or_path: local directory of a Qwen2.5-VL checkpoint (base model or an SFT output).
    dtype: torch dtype to load the weights in ("auto" keeps the checkpoint's).
    max_pixels: image budget per picture after resizing; must match serving (None: checkpoint's).
    freeze_vision_tower: keep the vision encoder fixed (both papers train the language model only).

    > Parameters that control LoRA (peft)

    use_lora, lora_r, lora_alpha, lora_dropout, lora_target_modules, lora_exclude_modules.
    """

    model_name_or_path: str | None = field(
        default=None,
        metadata={"help": "Local directory of the Qwen2.5-VL checkpoint to train (required)."},
    )
    dtype: str = field(
        default="auto",
        metadata={
            "help": "Torch dtype to load the weights in, e.g. 'bfloat16'; 'auto' keeps the checkpoint's."
        },
    )
    max_pixels: int | None = field(
        default=None,
        metadata={
            "help": "Pixels per image after resizing (changes the image token count; keep it equal to "
            "serving). None keeps the checkpoint's preprocessor setting."
        },
    )
    freeze_vision_tower: bool = field(
        default=True,
        metadata={
            "help": "Keep the vision encoder's weights fixed; only the language model trains."
        },
    )
    use_lora: bool = field(
        default=False,
        metadata={
            "help": "Train LoRA adapters instead of all weights (merged into the saved checkpoint)."
        },
    )
    lora_r: int = field(default=64, metadata={"help": "LoRA rank (SPECTRA Table 8: 64)."})
    lora_alpha: int = field(default=64, metadata={"help": "LoRA alpha (SPECTRA Table 8: 64)."})
    lora_dropout: float = field(default=0.05, metadata={"help": "Dropout on the LoRA branch."})
    lora_target_modules: list[str] = field(
        default_factory=lambda: list(LORA_TARGET_MODULES),
        metadata={"help": "Linear layers that get adapters (attention and MLP projections)."},
    )
    lora_exclude_modules: str = field(
        default=VISION_MODULES_PATTERN,
        metadata={
            "help": "Regex of modules never adapted; the default keeps the vision tower out."
        },
    )


@dataclass
class DataArguments:
    """Where the training rows come from.

    > SFT (cold start): accepted trajectories

    trajectories: curation exports, JSONL files with one trajectory JSON per line.
    sharegpt: LLaMA-Factory ShareGPT files (the public Spec-o3 cold-start set).
    smoke_tasks / smoke_samples_per_task: scripted two-step demonstrations on SpecVI-mini spectra,
        for CPU smoke runs only (the demonstrator is told the label).
    max_sequence_length: rows with more tokens (image tokens included) are dropped and counted.

    > DPO: preference pairs

    preference_pairs: dpo.jsonl files of a specvet preference export.

    > GRPO: label-only rows

    specvi_mini_*: SpecVI-mini spectra generated in memory (agent.synthetic.generate_split).
    verl_parquet: SpecVI-Bench / verl parquet files.

    > Both

    input_distribution: "specvet" (specvet's prompts and I0) or "dataset" (imported rows as
        shipped), one choice for SFT, GRPO and evaluation alike (training.inputs).
    """

    trajectories: list[str] = field(
        default_factory=list,
        metadata={"help": "Curation exports: JSONL files, one accepted trajectory JSON per line."},
    )
    sharegpt: list[str] = field(
        default_factory=list,
        metadata={
            "help": "ShareGPT JSON files (public Spec-o3 cold-start layout), images beside them."
        },
    )
    smoke_tasks: list[str] = field(
        default_factory=list,
        metadata={
            "help": "Task codes for scripted smoke demonstrations on SpecVI-mini spectra (CPU smoke "
            "runs only: the scripted demonstrator is given the label)."
        },
    )
    smoke_samples_per_task: int = field(
        default=2, metadata={"help": "Smoke demonstrations per task (half positives)."}
    )
    max_sequence_length: int | None = field(
        default=16384,
        metadata={
            "help": "SFT rows longer than this many tokens (image tokens included) are dropped and "
            "reported; rows are never truncated, since cutting image tokens breaks the image."
        },
    )
    use_tool: bool = field(
        default=True,
        metadata={
            "help": "False: the no-tool ablation (paper Table 4 #4): SFT on trajectories cut to "
            "I0 and the final answer, GRPO rollouts whose tool only says it is disabled."
        },
    )
    specvi_mini_tasks: list[str] = field(
        default_factory=list,
        metadata={"help": "Task codes of SpecVI-mini label-only rows for GRPO."},
    )
    specvi_mini_split: str = field(default="train", metadata={"help": "SpecVI-mini split."})
    specvi_mini_positives: int = field(default=20, metadata={"help": "Positives per task."})
    specvi_mini_negatives: int = field(default=20, metadata={"help": "Negatives per task."})
    specvi_mini_seed: int = field(default=20260, metadata={"help": "SpecVI-mini seed."})
    verl_parquet: list[str] = field(
        default_factory=list,
        metadata={"help": "SpecVI-Bench / verl parquet files of label-only rows for GRPO."},
    )
    preference_pairs: list[str] = field(
        default_factory=list,
        metadata={
            "help": "DPO: dpo.jsonl files of a preference export (TRL vision DPO rows), their "
            "images beside them (image paths are relative to the file)."
        },
    )
    input_distribution: str = field(
        default="specvet",
        metadata={
            "help": "What the policy is shown in its first turn, for SFT, GRPO and evaluation "
            "alike: 'specvet' (specvet's system prompt, T0 and I0; imported demonstrations get "
            "specvet's prompts) or 'dataset' (imported rows' own prompts and I0 as shipped). "
            "Recorded in the lineage; a run from a checkpoint trained on the other is refused.",
            "choices": ["specvet", "dataset"],
        },
    )


@dataclass
class RunArguments:
    """Metrics, validation and bookkeeping around a run.

    metrics_jsonl: per-step metrics go here (default OUTPUT_DIR/metrics.jsonl).
    validation_*: a small labelled SpecVI-mini set inspected with the current weights every N
        steps (agent.evaluation with an in-memory policy) for the validation F1 curve.
    """

    metrics_jsonl: str | None = field(
        default=None,
        metadata={
            "help": "JSONL file that receives per-step metrics (default OUTPUT_DIR/metrics.jsonl)."
        },
    )
    validation_tasks: list[str] = field(
        default_factory=list,
        metadata={
            "help": "Task codes of the SpecVI-mini validation set (empty: no validation F1)."
        },
    )
    validation_samples_per_task: int = field(
        default=10, metadata={"help": "Validation spectra per task (half positives)."}
    )
    validation_source: str = field(
        default="auto",
        metadata={
            "help": "'real': the validation split of agent.real_corpus; 'synthetic': SpecVI-mini; "
            "'auto': real when its cache is fetched (make real-data) and has the task, else "
            "synthetic. The metric name says which (val_f1_real / val_f1_synthetic)."
        },
    )
    validation_every_steps: int = field(
        default=50, metadata={"help": "Run the validation inspection every this many steps."}
    )
    validation_max_new_tokens: int = field(
        default=1024, metadata={"help": "Generation budget per validation turn."}
    )
    validation_max_tool_calls: int = field(
        default=8, metadata={"help": "Tool-call budget per validation episode (paper: 8)."}
    )
    validation_gather_zero3: bool = field(
        default=True,
        metadata={
            "help": "Under DeepSpeed ZeRO-3, gather the weights once for each validation pass "
            "(one full copy per GPU) instead of once per generated token."
        },
    )
    validation_seed: int = field(
        default=7,
        metadata={"help": "Seed of the SpecVI-mini validation split (never the test split)."},
    )
    gpu_memory_gib: float | None = field(
        default=None,
        metadata={
            "help": "GPU memory (GiB) the run is planned against (training.memory); default: what "
            "CUDA reports for the first device; no check on the CPU."
        },
    )
    check_memory: bool = field(
        default=True,
        metadata={"help": "Refuse a run whose memory arithmetic exceeds the GPU before it loads."},
    )


@dataclass
class SpecvetSFTConfig(SFTConfig):
    """TRL SFTConfig with the Spec-o3 cold-start defaults.

    > Defaults that differ from SFTConfig

    learning_rate 2e-5, num_train_epochs 5, lr_scheduler_type "cosine", warmup_steps 0.05 (a
    ratio), bf16 True, assistant_only_loss True (tool results, image tokens included, carry no
    loss), max_length None (rows are filtered by length before training, never truncated),
    logging_steps 1 (one metrics record per step), report_to "none".
    """

    learning_rate: float = field(default=2e-5, metadata={"help": "Peak learning rate (AdamW)."})
    num_train_epochs: float = field(default=5.0, metadata={"help": "Epochs over the trajectories."})
    lr_scheduler_type: SchedulerType | str = field(
        default="cosine", metadata={"help": "Learning-rate schedule."}
    )
    warmup_steps: float = field(
        default=0.05, metadata={"help": "Warmup: steps, or a ratio of all steps when below 1."}
    )
    bf16: bool | None = field(  # type: ignore[assignment]  # TrainingArguments says bool
        default=True, metadata={"help": "bf16 mixed precision (GPU)."}
    )
    assistant_only_loss: bool = field(
        default=True,
        metadata={
            "help": "Loss on assistant turns only; tool results (images included) are masked."
        },
    )
    max_length: int | None = field(
        default=None,
        metadata={
            "help": "Keep None: rows are filtered by DataArguments.max_sequence_length instead."
        },
    )
    logging_steps: float = field(
        default=1, metadata={"help": "Log (and record metrics) every N steps."}
    )
    report_to: None | str | list[str] = field(
        default="none",
        metadata={"help": "Integrations to report to (metrics go to the sink anyway)."},
    )


@dataclass
class SpecvetGRPOConfig(GRPOConfig):
    """TRL GRPOConfig with the Spec-o3 agentic-RL defaults and the reward settings.

    > Defaults that differ from GRPOConfig

    num_generations 8 and max_tool_calling_iterations 8 (paper section 4.2), loss_type "dapo"
    (verl's token-mean, the public recipe's; see LOSS_TYPES), mask_truncated_completions True, learning_rate 1e-6,
    temperature 1.0, max_completion_length 8192 (tool images count toward it), bf16 True,
    logging_steps 1, log_completions True, report_to "none".

    > Parameters that control the reward

    reward: "spec_o3" (paper eq. 3) or "spectra" (seed 002 eqs. 5-11).
    reward_alpha: the format penalty alpha of eq. 3 (public recipe 0.2).
    spectra_*: the SPECTRA reward constants, Table 8 values by default.
    """

    learning_rate: float = field(default=1e-6, metadata={"help": "Learning rate (AdamW)."})
    num_generations: int | None = field(
        default=8, metadata={"help": "Rollouts per prompt (paper: 8)."}
    )
    max_tool_calling_iterations: int | None = field(
        default=8, metadata={"help": "Tool calls per rollout at most (paper Algorithm 1: 8)."}
    )
    loss_type: str = field(
        default=DEFAULT_LOSS_TYPE,
        metadata={
            "help": "Loss aggregation: 'dapo' (default; verl token-mean, the public Spec-o3 "
            "recipe) or 'grpo' (verl seq-mean-token-mean, length-biased)."
        },
    )
    mask_truncated_completions: bool = field(
        default=True, metadata={"help": "Rollouts cut by the length limit carry no loss."}
    )
    temperature: float = field(default=1.0, metadata={"help": "Sampling temperature of rollouts."})
    max_completion_length: int | None = field(
        default=8192,
        metadata={"help": "Tokens per rollout after the prompt, tool results and images included."},
    )
    bf16: bool | None = field(  # type: ignore[assignment]  # TrainingArguments says bool
        default=True, metadata={"help": "bf16 mixed precision (GPU)."}
    )
    logging_steps: float = field(
        default=1, metadata={"help": "Log (and record metrics) every N steps."}
    )
    log_completions: bool = field(
        default=True, metadata={"help": "Write sampled completions to OUTPUT_DIR/completions."}
    )
    report_to: None | str | list[str] = field(
        default="none",
        metadata={"help": "Integrations to report to (metrics go to the sink anyway)."},
    )
    reward: str = field(
        default="spec_o3",
        metadata={"help": "Reward: 'spec_o3' (paper eq. 3) or 'spectra' (SPECTRA eqs. 5-11)."},
    )
    reward_alpha: float = field(
        default=0.2, metadata={"help": "Format penalty alpha of eq. 3 (public recipe: 0.2)."}
    )
    spectra_lambda_correct: float = field(default=1.0, metadata={"help": "SPECTRA lambda_1."})
    spectra_lambda_struct: float = field(default=1.0, metadata={"help": "SPECTRA lambda_2."})
    spectra_lambda_tool: float = field(default=2.0, metadata={"help": "SPECTRA lambda_3."})
    spectra_lambda_term: float = field(default=3.0, metadata={"help": "SPECTRA lambda_4."})
    spectra_c1: float = field(default=8.0, metadata={"help": "SPECTRA C1, correct-answer reward."})
    spectra_c2: float = field(default=2.0, metadata={"help": "SPECTRA C2, terminal reward."})
    spectra_alpha: float = field(default=2.0, metadata={"help": "SPECTRA alpha, best structure."})
    spectra_beta: float = field(
        default=0.1, metadata={"help": "SPECTRA beta, per-tool-kind reward."}
    )
    spectra_gamma: float = field(default=0.75, metadata={"help": "SPECTRA gamma, structure decay."})
    spectra_eta: float = field(default=0.8, metadata={"help": "SPECTRA eta, diversity cap."})
    spectra_kappa: int = field(default=2, metadata={"help": "SPECTRA kappa, per-kind count cap."})
    spectra_scale: float = field(default=2.5, metadata={"help": "SPECTRA S, output scale."})
    spectra_n_norm: float = field(
        default=21.6, metadata={"help": "SPECTRA N_norm, max raw reward."}
    )

    def __post_init__(self) -> None:
        if self.reward not in REWARD_NAMES:
            raise ValueError(f"reward must be one of {REWARD_NAMES}; got {self.reward!r}")
        if self.loss_type not in LOSS_TYPES:
            raise ValueError(
                f"loss_type must be one of {sorted(LOSS_TYPES)} (dapo: verl token-mean, the "
                f"public recipe's; grpo: verl seq-mean-token-mean); got {self.loss_type!r}"
            )
        super().__post_init__()

    def loss_record(self) -> dict[str, str]:
        """What the lineage says about the loss aggregation of this run."""
        return {
            "loss_type": self.loss_type,
            "computes": LOSS_TYPES[self.loss_type],
            "default": DEFAULT_LOSS_TYPE,
            "why_default": DEFAULT_LOSS_REASON,
        }


@dataclass
class SpecvetDPOConfig(DPOConfig):
    """TRL DPOConfig with the settings a vision preference run needs.

    > Defaults that differ from DPOConfig

    max_length None (TRL's vision collator must not cut image tokens; rows are whole turns),
    bf16 True, logging_steps 1 (one metrics record per step), report_to "none". beta (0.1) and
    learning_rate (1e-6) stay TRL's.
    """

    bf16: bool | None = field(  # type: ignore[assignment]  # TrainingArguments says bool
        default=True, metadata={"help": "bf16 mixed precision (GPU)."}
    )
    max_length: int | None = field(
        default=None,
        metadata={"help": "Keep None: cutting a vision row's image tokens breaks the row."},
    )
    logging_steps: float = field(
        default=1, metadata={"help": "Log (and record metrics) every N steps."}
    )
    report_to: None | str | list[str] = field(
        default="none",
        metadata={"help": "Integrations to report to (metrics go to the sink anyway)."},
    )


# --- generation backends -----------------------------------------------------------------------

DEADLOCK_NOTE = (
    "TRL 1.16's tool loop (GRPOTrainer._tool_call_loop) runs one generation call per tool round "
    "on each rank, and rollouts end after different numbers of rounds, so ranks make different "
    "numbers of generation calls"
)


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").lower() in ("1", "true", "yes")


def launch_layout() -> tuple[int, bool]:
    """(world size, parameters sharded) as ``accelerate launch`` or torchrun set them."""
    world_size = int(os.environ.get("WORLD_SIZE", "1") or 1)
    zero3 = (
        _env_flag("ACCELERATE_USE_DEEPSPEED")
        and os.environ.get("ACCELERATE_DEEPSPEED_ZERO_STAGE", "") == "3"
    )
    return world_size, zero3 or _env_flag("ACCELERATE_USE_FSDP")


def check_generation_setup(
    args: Any, *, world_size: int | None = None, sharded: bool | None = None
) -> None:
    """Refuse GRPO generation setups that cannot run multi-turn tool rollouts in TRL 1.16.

    Safe: HF ``generate`` on one process or plain data parallel; vLLM ``colocate`` with tensor
    parallel size 1 and no sleep mode on any number of ranks (each rank generates with its own
    engine; weights sync once per step, which every rank reaches); vLLM ``server`` with one
    training process. Everything else puts a collective inside each generation call.
    """
    detected_world, detected_sharded = launch_layout()
    world_size = detected_world if world_size is None else world_size
    sharded = detected_sharded if sharded is None else sharded
    if args.use_vllm:
        if importlib.util.find_spec("vllm") is None:
            raise ValueError(
                "use_vllm is set but vLLM is not installed; on a GPU host run "
                "`pip install -r requirements-gpu.txt`, or set use_vllm: false (HF generate)"
            )
        if args.vllm_mode not in ("colocate", "server"):
            raise ValueError(f"vllm_mode must be 'colocate' or 'server'; got {args.vllm_mode!r}")
        if args.vllm_mode == "server" and world_size > 1:
            raise ValueError(
                f"vllm_mode 'server' with {world_size} training processes would deadlock: "
                f"{DEADLOCK_NOTE}, and server mode gathers prompts across all ranks in each "
                "call. Use vllm_mode 'colocate' (one engine per training GPU), or train with one "
                "process against the server."
            )
        if args.vllm_mode == "colocate" and args.vllm_tensor_parallel_size > 1 and world_size > 1:
            raise ValueError(
                f"vllm_tensor_parallel_size {args.vllm_tensor_parallel_size} would deadlock: "
                f"{DEADLOCK_NOTE}, and tensor-parallel colocate gathers prompts across its group "
                "in each call. Keep vllm_tensor_parallel_size 1 (a 7B engine fits one GPU)."
            )
        if args.vllm_mode == "colocate" and args.vllm_enable_sleep_mode and sharded:
            raise ValueError(
                f"vllm_enable_sleep_mode with ZeRO-3/FSDP would deadlock: {DEADLOCK_NOTE}, and "
                "waking a sleeping engine re-gathers the sharded weights in each call."
            )
    elif sharded and world_size > 1:
        raise ValueError(
            f"HF generate with ZeRO-3/FSDP on {world_size} processes would deadlock: "
            f"{DEADLOCK_NOTE}, and each call gathers the sharded weights. Set use_vllm: true "
            "and vllm_mode: colocate (training/configs/grpo_gpu.yaml does)."
        )


# --- parsing -----------------------------------------------------------------------------------


def parse_config(dataclass_types: Sequence[type], args: Iterable[str] | None = None) -> tuple:
    """Instances of ``dataclass_types`` from ``--preset``, ``--config`` YAML and flags, in that
    order of increasing priority. Unknown keys in the YAML raise ValueError naming them."""
    from trl import TrlParser

    argv = list(sys.argv[1:] if args is None else args)
    config_path = _pop_option(argv, "--config")
    file_values = read_yaml_config(Path(config_path)) if config_path else {}
    preset = _pop_option(argv, "--preset") or file_values.pop("preset", None)
    for key, value in (file_values.pop("env", None) or {}).items():
        os.environ[str(key)] = str(value)

    parser_types: list[Any] = list(dataclass_types)  # TrlParser wants its own DataClassType
    parser = TrlParser(parser_types)
    if preset is not None:
        _apply_defaults(parser, preset_values(preset), f"preset {preset!r}")
    _apply_defaults(parser, file_values, f"config file {config_path}")
    return tuple(parser.parse_args_into_dataclasses(args=argv))


def preset_values(name: str) -> dict[str, Any]:
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; known presets: {sorted(PRESETS)}")
    return dict(PRESETS[name])


def read_yaml_config(path: Path) -> dict[str, Any]:
    try:
        values = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as error:
        raise ValueError(f"cannot read config file {path}: {error}") from error
    if values is None:
        return {}
    if not isinstance(values, dict):
        raise ValueError(f"config file {path} must hold a YAML mapping of field names to values")
    return values


def _apply_defaults(parser: Any, values: dict[str, Any], source: str) -> None:
    unknown = parser.set_defaults_with_config(**values)
    if unknown:
        names = sorted(item[2:] for item in unknown[::2])
        raise ValueError(f"{source} sets unknown fields {names}")


def _pop_option(argv: list[str], flag: str) -> str | None:
    for position, item in enumerate(argv):
        if item == flag:
            if position + 1 >= len(argv):
                raise ValueError(f"{flag} needs a value")
            value = argv[position + 1]
            del argv[position : position + 2]
            return value
        if item.startswith(flag + "="):
            del argv[position]
            return item.split("=", 1)[1]
    return None


def config_to_dict(*configs: Any) -> dict[str, Any]:
    """A JSON-safe dict of several config dataclasses, keyed by class name (for lineage files)."""
    result: dict[str, Any] = {}
    for config in configs:
        values = config.to_dict() if hasattr(config, "to_dict") else dataclasses.asdict(config)
        result[type(config).__name__] = json.loads(json.dumps(values, default=str))
    return result
