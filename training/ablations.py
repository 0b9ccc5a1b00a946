"""The ablations of paper Table 4, one command each: train the variant and evaluate it.

```bash
python -m training.ablations full     --base /models/Qwen2.5-VL-7B-Instruct \\
    --sharegpt data/train_sharegpt.json --rl-tasks CV CS SS MG WD --out runs/table4-7b
python -m training.ablations sft-only ...   # Table 4 #2: cold-start SFT, no RL
python -m training.ablations rl-only  ...   # #1: GRPO straight from the base model
python -m training.ablations no-tool  ...   # #4: SFT and RL without the tool, evaluated without it
python -m training.ablations base     ...   # #3: the base model, zero-shot, with the tool
```

Each variant runs its stages in order (``training.sft``, ``training.grpo`` with the GPU configs,
under ``accelerate launch`` when ``--accelerate-config`` is given) into ``OUT/VARIANT/``, then
``python manage.py evaluate`` with the offline vLLM policy on the benchmark, writing
``OUT/VARIANT/eval.json`` and printing the Table 1 layout; ``--dry-run`` prints the commands.
The no-tool variant trains on trajectories cut to I0 and the final answer (``--use_tool false``)
and is evaluated with ``--no-tool``.
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

VARIANTS = {  # name: (Table 4 row, SFT, RL, tool)
    "full": (0, True, True, True),
    "rl-only": (1, False, True, True),
    "sft-only": (2, True, False, True),
    "base": (3, False, False, True),
    "no-tool": (4, True, True, False),
}
CONFIGS = Path("training/configs")


def variant_commands(variant: str, options: argparse.Namespace) -> list[list[str]]:
    """The commands that train and evaluate ``variant``, in order."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; choose from {sorted(VARIANTS)}")
    _, sft, rl, tool = VARIANTS[variant]
    if sft and not (options.sharegpt or options.trajectories):
        raise ValueError(f"variant {variant} trains SFT: give --sharegpt or --trajectories")
    if rl and not (options.rl_tasks or options.verl_parquet):
        raise ValueError(f"variant {variant} trains GRPO: give --rl-tasks or --verl-parquet")
    out = Path(options.out) / variant
    launcher = [sys.executable, "-m"]
    if options.accelerate_config:
        launcher = ["accelerate", "launch", "--config_file", str(options.accelerate_config), "-m"]
    shared_flags = [] if tool else ["--use_tool", "false"]
    # One input distribution for the variant's SFT, GRPO and evaluation (training.inputs).
    inputs = options.input_distribution
    shared_flags += ["--input_distribution", inputs]
    commands: list[list[str]] = []
    model = str(options.base)
    if sft:
        data = [*(["--sharegpt", *options.sharegpt] if options.sharegpt else [])]
        data += ["--trajectories", *options.trajectories] if options.trajectories else []
        commands.append(
            [
                *launcher,
                "training.sft",
                "--config",
                str(CONFIGS / "sft_gpu.yaml"),
                "--model_name_or_path",
                model,
                *data,
                *shared_flags,
                "--output_dir",
                str(out / "sft"),
            ]
        )
        model = str(out / "sft")
    if rl:
        data = ["--specvi_mini_tasks", *options.rl_tasks] if options.rl_tasks else []
        data += ["--verl_parquet", *options.verl_parquet] if options.verl_parquet else []
        commands.append(
            [
                *launcher,
                "training.grpo",
                "--config",
                str(CONFIGS / "grpo_gpu.yaml"),
                *(["--preset", options.preset] if options.preset else []),
                "--model_name_or_path",
                model,
                *data,
                *shared_flags,
                "--output_dir",
                str(out / "grpo"),
            ]
        )
        model = str(out / "grpo")
    benchmark = ["--benchmark", options.benchmark]
    if options.data_dir:
        benchmark += ["--data-dir", str(options.data_dir)]
    commands.append(
        [
            sys.executable,
            "manage.py",
            "evaluate",
            "--policy",
            "vllm",
            "--model-path",
            model,
            *benchmark,
            "--split",
            "test",
            "--tasks",
            ",".join(options.eval_tasks),
            "--batch-size",
            str(options.eval_batch_size),
            *([] if tool else ["--no-tool"]),
            "--input-distribution",
            inputs,
            "--out",
            str(out / "eval.json"),
        ]
    )
    return commands


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m training.ablations", description=__doc__.splitlines()[0]
    )
    parser.add_argument("variant", choices=sorted(VARIANTS))
    parser.add_argument("--base", required=True, type=Path, help="base Qwen2.5-VL checkpoint")
    parser.add_argument("--out", required=True, type=Path, help="runs/table4-7b, say")
    parser.add_argument("--sharegpt", nargs="*", default=[], help="cold-start SFT ShareGPT files")
    parser.add_argument("--trajectories", nargs="*", default=[], help="curation JSONL exports")
    parser.add_argument("--rl-tasks", nargs="*", default=[], help="SpecVI-mini tasks for GRPO")
    parser.add_argument("--verl-parquet", nargs="*", default=[], help="SpecVI-Bench train files")
    parser.add_argument("--preset", default=None, help="GRPO preset, e.g. spectra (LoRA)")
    parser.add_argument("--accelerate-config", type=Path, help="training/configs/accelerate/*")
    parser.add_argument("--benchmark", default="specvi-bench", help="evaluate --benchmark")
    parser.add_argument("--data-dir", type=Path, help="SpecVI-Bench parquet folder")
    parser.add_argument("--eval-tasks", nargs="+", default=["CV", "CS", "SS", "MG", "WD"])
    parser.add_argument("--eval-batch-size", type=int, default=64)
    parser.add_argument(
        "--input-distribution",
        choices=["dataset", "specvet"],
        default="dataset",
        help="what SFT, GRPO and evaluation show in the first turn: the public rows' own "
        "prompts and I0 (dataset, default: like for like with the paper) or specvet's",
    )
    parser.add_argument("--dry-run", action="store_true", help="print the commands only")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    options = make_parser().parse_args(argv)
    try:
        commands = variant_commands(options.variant, options)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    row = VARIANTS[options.variant][0]
    print(f"# Table 4 #{row}: {options.variant}", flush=True)
    for command in commands:
        print(shlex.join(command), flush=True)
        if not options.dry_run:
            subprocess.run(command, check=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
