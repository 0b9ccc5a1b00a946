"""GPU smoke test of the training recipe on random-initialised Qwen2.5-VL-3B and -7B.

No weights can be downloaded where this runs, so each model is built from its architecture
(Qwen2.5-VL-3B/7B-Instruct ``config.json`` values) with random weights and the tiny byte-level
tokenizer and image processor of ``training.tiny_model``; what is measured is speed and memory,
not quality. For each size it runs a few SFT steps and a few GRPO steps with the GPU configs
(``training/configs/*_gpu.yaml``; GRPO generates with colocated vLLM when vLLM is installed, HF
``generate`` otherwise), then vLLM generation when installed, and prints tokens/s and peak GPU
memory per stage (JSON in ``OUT/gpu_smoke.json``):

```bash
python -m training.gpu_smoke --sizes 3b 7b --steps 3 --out /tmp/gpu-smoke
```

The defaults use batch 1 x 4 accumulation for SFT and 8 rollouts for GRPO. Full fine-tuning keeps
fp32 master weights (``training/precision.py``), so on one H200 the 3B stages fit and the 7B ones
are at or past the card's memory: a stage whose memory plan (``training/memory.py``) does not fit
is reported as refused, with the arithmetic, not as a failure. ``--sizes tiny --cpu`` runs the
same plan on the tiny model on any machine; ``training.gpu_check`` is the check with verdicts.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from training.memory import MemoryPlanError

CONFIGS = Path(__file__).resolve().parent / "configs"
SEED = 7
# preprocessor_config.json of Qwen2.5-VL-3B/7B-Instruct: a tool image keeps its own size.
QWEN25_VL_MAX_PIXELS = 12845056

_VISION_BASE = {
    "depth": 32,
    "hidden_size": 1280,
    "intermediate_size": 3420,
    "num_heads": 16,
    "patch_size": 14,
    "spatial_merge_size": 2,
    "temporal_patch_size": 2,
    "window_size": 112,
    "fullatt_block_indexes": [7, 15, 23, 31],
}
_ROPE = {"mrope_section": [16, 24, 24], "rope_theta": 1000000.0, "rope_type": "default"}
# Qwen2.5-VL-{3B,7B}-Instruct config.json; the vocabulary stays the real size (151,936) so the
# embedding and LM head cost what they cost, though the smoke tokenizer uses few ids.
SIZES: dict[str, dict[str, Any]] = {
    "3b": {
        "text": {
            "hidden_size": 2048,
            "intermediate_size": 11008,
            "num_hidden_layers": 36,
            "num_attention_heads": 16,
            "num_key_value_heads": 2,
            "vocab_size": 151936,
            "tie_word_embeddings": True,
            "rope_parameters": _ROPE,
            "max_position_embeddings": 128000,
        },
        "vision": {**_VISION_BASE, "out_hidden_size": 2048},
    },
    "7b": {
        "text": {
            "hidden_size": 3584,
            "intermediate_size": 18944,
            "num_hidden_layers": 28,
            "num_attention_heads": 28,
            "num_key_value_heads": 4,
            "vocab_size": 151936,
            "tie_word_embeddings": False,
            "rope_parameters": _ROPE,
            "max_position_embeddings": 128000,
        },
        "vision": {**_VISION_BASE, "out_hidden_size": 3584},
    },
    # Qwen2.5-0.5B's language model (hidden 896, 24 layers, real vocabulary, tied head) with a
    # small vision tower: the model of ``training.gpu_check`` (0.51 B parameters).
    "0.5b": {
        "text": {
            "hidden_size": 896,
            "intermediate_size": 4864,
            "num_hidden_layers": 24,
            "num_attention_heads": 14,
            "num_key_value_heads": 2,
            "vocab_size": 151936,
            "tie_word_embeddings": True,
            # head_dim 64: the rotary sections of Qwen2.5-VL's [16, 24, 24] (head_dim 128) halved
            "rope_parameters": {**_ROPE, "mrope_section": [8, 12, 12]},
            "max_position_embeddings": 32768,
        },
        "vision": {
            **_VISION_BASE,
            "depth": 4,
            "hidden_size": 512,
            "intermediate_size": 1536,
            "num_heads": 8,
            "fullatt_block_indexes": [1, 3],
            "out_hidden_size": 896,
        },
    },
    "tiny": {"text": {}, "vision": {}},  # training.tiny_model as it is
}


def model_config(size: str, tiny_config: Any) -> Any:
    """The Qwen2_5_VLConfig of ``size``, with the smoke tokenizer's special-token ids."""
    from transformers import Qwen2_5_VLConfig

    if size not in SIZES:
        raise ValueError(f"unknown size {size!r}; choose from {sorted(SIZES)}")
    text = {**tiny_config.text_config.to_dict(), **SIZES[size]["text"]}
    if SIZES[size]["text"]:
        text.pop("layer_types", None)  # derived from num_hidden_layers again
    vision = {**tiny_config.vision_config.to_dict(), **SIZES[size]["vision"]}
    tie = text.get("tie_word_embeddings", False)
    return Qwen2_5_VLConfig(
        text_config=text,
        vision_config=vision,
        image_token_id=tiny_config.image_token_id,
        video_token_id=tiny_config.video_token_id,
        vision_start_token_id=tiny_config.vision_start_token_id,
        vision_end_token_id=tiny_config.vision_end_token_id,
        tie_word_embeddings=tie,
    )


def parameter_count(config: Any) -> int:
    """Parameters of a model of ``config``, counted without allocating them."""
    import torch
    from transformers import Qwen2_5_VLForConditionalGeneration

    with torch.device("meta"):
        model = Qwen2_5_VLForConditionalGeneration(config)
    return sum(parameter.numel() for parameter in model.parameters())


def build_checkpoint(size: str, path: Path, *, device: str = "cuda") -> Path:
    """A random ``size`` checkpoint in bf16 with the tiny tokenizer and processor."""
    import torch
    from transformers import AutoConfig, Qwen2_5_VLForConditionalGeneration

    from training.tiny_model import build_tiny_model

    build_tiny_model(path)
    if size == "tiny":
        return path
    config = model_config(size, AutoConfig.from_pretrained(str(path)))
    with torch.device(device):
        model = Qwen2_5_VLForConditionalGeneration(config).to(torch.bfloat16)  # type: ignore[arg-type]
    model.save_pretrained(path)
    del model
    return path


def smoke_plan(
    size: str,
    checkpoint: Path,
    out: Path,
    *,
    steps: int,
    use_vllm: bool,
    cpu: bool = False,
    tool_turns: int = 8,
) -> dict[str, list[str]]:
    """Command-line arguments of the SFT and GRPO stages (``training.sft``/``training.grpo``).

    ``tool_turns`` bounds GRPO's tool rounds: a random model never answers, so every rollout
    runs all of them, and fewer rounds measure the same tokens/s in less device time."""
    common = [
        "--model_name_or_path",
        str(checkpoint),
        "--max_steps",
        str(steps),
        "--save_strategy",
        "no",
        "--validation_every_steps",
        "1000000",
        "--report_to",
        "none",
        *(
            ["--use_cpu", "true", "--bf16", "false", "--gradient_checkpointing", "false"]
            if cpu
            else []
        ),
    ]
    sft = [
        "--config",
        str(CONFIGS / "sft_gpu.yaml"),
        *common,
        "--smoke_tasks",
        "CV",
        "--smoke_samples_per_task",
        "8",
        "--per_device_train_batch_size",
        "1",
        "--gradient_accumulation_steps",
        "4",
        "--output_dir",
        str(out / size / "sft"),
    ]
    grpo = [
        "--config",
        str(CONFIGS / "grpo_gpu.yaml"),
        *common,
        "--specvi_mini_tasks",
        "CV",
        "--specvi_mini_positives",
        "4",
        "--specvi_mini_negatives",
        "4",
        "--per_device_train_batch_size",
        "8",
        "--gradient_accumulation_steps",
        "1",
        "--max_completion_length",
        "512",
        "--max_tool_calling_iterations",
        str(tool_turns),
        "--use_vllm",
        "true" if use_vllm else "false",
        "--output_dir",
        str(out / size / "grpo"),
    ]
    return {"sft": sft, "grpo": grpo}


def _measure(stage: Callable[[], int | None]) -> dict[str, Any]:
    """Seconds, tokens/s and peak GPU memory of ``stage`` (which returns its token count)."""
    import torch

    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    started = time.perf_counter()
    try:
        tokens = stage()
    except MemoryPlanError as refusal:  # not a failure: the plan said it would not fit
        return refused(refusal)
    except Exception as error:  # a smoke report names what failed and goes on
        return {"ok": False, "error": f"{type(error).__name__}: {error}"}
    seconds = time.perf_counter() - started
    return {
        "ok": True,
        "seconds": round(seconds, 2),
        "tokens": tokens,
        "tokens_per_s": round(tokens / seconds, 1) if tokens else None,
        "peak_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2) if cuda else None,
    }


def refused(refusal: MemoryPlanError) -> dict[str, Any]:
    """The report row of a stage whose memory plan was refused before the model loaded: the
    reason and the arithmetic (``training.memory.MemoryEstimate``), not a failure."""
    estimate = refusal.estimate
    return {
        "ok": False,
        "refused": True,
        "reason": str(refusal),
        "arithmetic": estimate.summary() if estimate is not None else None,
        "memory": estimate.as_dict() if estimate is not None else None,
    }


def _train(module: Any, argv: list[str]) -> int | None:
    parsed = module.parse_args(argv)
    run = (module.build_sft_run if module.__name__.endswith("sft") else module.build_grpo_run)(
        *parsed
    )
    run.trainer.train()
    seen = [
        entry.get("num_tokens") for entry in run.trainer.state.log_history if "num_tokens" in entry
    ]
    tokens = int(seen[-1]) if seen else int(run.trainer.state.num_input_tokens_seen or 0)
    del run
    return tokens or None


def _vllm_generate(checkpoint: Path, n_prompts: int = 32, max_tokens: int = 256) -> int:
    import vllm

    llm = vllm.LLM(
        model=str(checkpoint),
        max_model_len=4096,
        gpu_memory_utilization=0.5,
        limit_mm_per_prompt={"image": 1},
    )
    params = vllm.SamplingParams(max_tokens=max_tokens, ignore_eos=True, temperature=1.0)
    outputs = llm.generate(
        [{"prompt_token_ids": [10, 20, 30, 40] * 16}] * n_prompts, params, use_tqdm=False
    )
    return sum(len(output.outputs[0].token_ids) for output in outputs)


def _first_turn_messages(spectrum: Any, task: Any, policy: Any) -> list[dict[str, Any]]:
    """The conversation the policy sees on an episode's first turn (system, prompt, image I0)."""
    from agent.rollout import episode

    return next(episode(spectrum, task, policy, max_tool_calls=1))


def _synchronize() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _timed_generate(policy: Any, inputs: dict[str, Any], tokens: int) -> tuple[float, int]:
    """Seconds to generate exactly ``tokens`` for each conversation of ``inputs``, and the
    tokens generated in all."""
    import torch

    _synchronize()
    started = time.perf_counter()
    with torch.inference_mode():
        output = policy.model.generate(
            **inputs,
            max_new_tokens=tokens,
            min_new_tokens=tokens,
            do_sample=False,
            pad_token_id=policy.processor.tokenizer.pad_token_id,
        )
    _synchronize()
    batch, prompt_length = inputs["input_ids"].shape
    return time.perf_counter() - started, int(output.shape[1] - prompt_length) * int(batch)


def inspect_serving(
    checkpoint: Path,
    *,
    cpu: bool = False,
    episodes: int = 4,
    new_tokens: int = 256,
    batch_sizes: Sequence[int] = (1, 8, 32),
    max_pixels: int = QWEN25_VL_MAX_PIXELS,
) -> dict[str, Any]:
    """What one inspection turn costs on this device with the agent's ``TransformersPolicy``.

    First ``episodes`` real first turns through ``agent.rollout.inspect`` (the policy loads the
    checkpoint as a worker would; the prompt is the system prompt, the task prompt and the
    tool's full-spectrum image of a SpecVI-mini CV spectrum), then the same turn's inputs
    generated for ``batch_sizes`` conversations at once with ``generate`` (HF batching, no
    paged attention: a floor for what vLLM does on the same GPU). A random model never emits
    the end-of-turn token on purpose, so every turn generates exactly ``new_tokens``.
    """
    import torch

    from agent import synthetic
    from agent.inspection_tasks import get_task
    from agent.policies.transformers_policy import TransformersPolicy
    from agent.rollout import inspect

    device = "cpu" if cpu else "cuda"
    policy = TransformersPolicy(
        checkpoint,
        device=device,
        dtype=None if cpu else "bfloat16",
        sampling={"max_new_tokens": new_tokens},
        max_pixels=max_pixels,
    )
    task = get_task("CV")
    samples = synthetic.generate_split("CV", "test", n_pos=1, n_neg=max(1, episodes), seed=SEED)
    inspect(samples[0].spectrum, task, policy, max_tool_calls=1)  # warm-up: kernels, caches
    turns: list[Any] = []
    for sample in samples[1 : episodes + 1]:
        trajectory = inspect(sample.spectrum, task, policy, max_tool_calls=1)
        turns.extend(step for step in trajectory.steps if step.completion_tokens)
    if not turns:
        raise RuntimeError("no turn generated any token")
    result: dict[str, Any] = {
        "ok": True,
        "new_tokens": new_tokens,
        "prompt_tokens": max(step.prompt_tokens or 0 for step in turns),
        "image_tokens": policy.last_usage.get("image_tokens"),
        "turn_seconds": [round(step.generate_s or 0.0, 3) for step in turns],
        "turn_tokens_per_s": round(
            sum(int(step.completion_tokens or 0) for step in turns)
            / sum(float(step.generate_s or 0.0) for step in turns),
            1,
        ),
        "batched": [],
    }
    inputs = policy.prepare_inputs(_first_turn_messages(samples[1].spectrum, task, policy))
    for batch in batch_sizes:
        batched = {
            "input_ids": inputs["input_ids"].repeat(batch, 1),
            "attention_mask": inputs["attention_mask"].repeat(batch, 1),
            "pixel_values": inputs["pixel_values"].repeat(batch, 1),
            "image_grid_thw": inputs["image_grid_thw"].repeat(batch, 1),
        }
        batched = {key: value.to(device) for key, value in batched.items()}
        _timed_generate(policy, batched, 1)  # warm-up at this batch size (kernels, allocator)
        if torch.cuda.is_available():
            torch.cuda.reset_peak_memory_stats()
        first_token, _ = _timed_generate(policy, batched, 1)  # prefill, image encoder included
        seconds, generated = _timed_generate(policy, batched, new_tokens)
        result["batched"].append(
            {
                "batch": batch,
                "seconds": round(seconds, 3),
                "prefill_seconds": round(first_token, 3),
                "tokens_per_s": round(generated / seconds, 1),
                "decode_tokens_per_s": round(
                    (generated - batch) / max(seconds - first_token, 1e-9), 1
                ),
                "peak_gib": (
                    round(torch.cuda.max_memory_allocated() / 2**30, 2)
                    if torch.cuda.is_available()
                    else None
                ),
            }
        )
    del policy
    return result


def environment() -> dict[str, Any]:
    """The device and the versions that produced the figures."""
    import platform

    import torch
    import transformers
    import trl

    cuda = torch.cuda.is_available()
    return {
        "device": torch.cuda.get_device_name(0) if cuda else platform.processor() or "cpu",
        "gpu_memory_gib": (
            round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1) if cuda else None
        ),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "transformers": transformers.__version__,
        "trl": trl.__version__,
    }


def run_smoke(
    sizes: Sequence[str],
    out: Path,
    *,
    steps: int,
    cpu: bool = False,
    tool_turns: int = 8,
    report_path: Path | None = None,
    stages: Sequence[str] = ("sft", "grpo"),
    serve_batches: Sequence[int] = (1, 8, 32),
) -> dict[str, Any]:
    """Each size's stages in turn; the report is written after every stage (``report_path``,
    default ``OUT/gpu_smoke.json``), so a run stopped at a time limit keeps what it measured."""
    from training import grpo, sft

    vllm_installed = importlib.util.find_spec("vllm") is not None and not cpu
    report: dict[str, Any] = {
        "vllm_installed": vllm_installed,
        "environment": environment(),
        "tool_turns": tool_turns,
        "steps": steps,
        "sizes": {},
    }
    path = report_path or out / "gpu_smoke.json"
    path.parent.mkdir(parents=True, exist_ok=True)

    def save() -> None:
        path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")

    for size in sizes:
        results: dict[str, Any] = {}
        report["sizes"][size] = results
        started = time.perf_counter()
        checkpoint = build_checkpoint(size, out / size / "model", device="cpu" if cpu else "cuda")
        results["build"] = {"ok": True, "seconds": round(time.perf_counter() - started, 2)}
        plan = smoke_plan(
            size,
            checkpoint,
            out,
            steps=steps,
            use_vllm=vllm_installed,
            cpu=cpu,
            tool_turns=tool_turns,
        )
        save()
        for stage, module in (("sft", sft), ("grpo", grpo)):
            if stage in stages:
                results[stage] = _measure(partial(_train, module, plan[stage]))
                save()
        if "inspect" in stages:
            try:
                results["inspect"] = inspect_serving(checkpoint, cpu=cpu, batch_sizes=serve_batches)
            except Exception as error:  # a smoke report names what failed and goes on
                results["inspect"] = {"ok": False, "error": f"{type(error).__name__}: {error}"}
            save()
        if vllm_installed:
            results["vllm_generate"] = _measure(partial(_vllm_generate, checkpoint))
            save()
    return report


def format_report(report: dict[str, Any]) -> str:
    env = report.get("environment") or {}
    lines = [
        *(
            [", ".join(f"{key} {value}" for key, value in env.items() if value is not None)]
            if env
            else []
        ),
        f"vLLM installed: {report['vllm_installed']}",
        "size  stage          ok   seconds  tokens/s  peak GiB",
    ]
    for size, stages in report["sizes"].items():
        for stage, row in stages.items():
            if stage == "build":
                lines.append(f"{size:<5} {'build':<14} yes  {row['seconds']:7.1f}")
                continue
            if row.get("refused"):
                lines.append(
                    f"{size:<5} {stage:<14} refused by the memory plan before loading: "
                    f"{row['arithmetic'] or row['reason']}"
                )
                continue
            if not row["ok"]:
                lines.append(f"{size:<5} {stage:<14} no   {row['error'][:100]}")
                continue
            if stage == "inspect":
                lines.append(_format_inspect(size, row))
                continue
            lines.append(
                f"{size:<5} {stage:<14} yes  {row['seconds']:7.1f}  {row['tokens_per_s'] or 0:8.1f}  "
                f"{row['peak_gib'] if row['peak_gib'] is not None else '-':>8}"
            )
    return "\n".join(lines)


def _format_inspect(size: str, row: dict[str, Any]) -> str:
    turns = row["turn_seconds"]
    lines = [
        f"{size:<5} inspect        yes  one turn ({row['prompt_tokens']} prompt tokens, "
        f"{row['image_tokens']} of them image, {row['new_tokens']} new): "
        f"median {statistics.median(turns):.2f} s, {row['turn_tokens_per_s']:.1f} tokens/s"
    ]
    for batched in row["batched"]:
        lines.append(
            f"{'':<5} {'':<14}      {batched['batch']:>3} turns at once: {batched['seconds']:.2f} s "
            f"(prefill {batched['prefill_seconds']:.2f} s), {batched['tokens_per_s']:.1f} tokens/s "
            f"({batched['decode_tokens_per_s']:.1f} decoding), peak {batched['peak_gib']} GiB"
        )
    return "\n".join(lines)


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m training.gpu_smoke", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--sizes", nargs="+", default=["3b", "7b"], choices=sorted(SIZES))
    parser.add_argument("--steps", type=int, default=3, help="optimizer steps per stage")
    parser.add_argument("--out", type=Path, default=Path("/tmp/gpu-smoke"))
    parser.add_argument(
        "--tool-turns",
        type=int,
        default=8,
        help="GRPO tool rounds per rollout (the recipe's 8; fewer spend less device time)",
    )
    parser.add_argument(
        "--report", type=Path, default=None, help="where the JSON report goes (OUT/gpu_smoke.json)"
    )
    parser.add_argument(
        "--cpu", action="store_true", help="run the plan on the CPU (use --sizes tiny)"
    )
    parser.add_argument(
        "--stages",
        nargs="+",
        default=["sft", "grpo"],
        choices=["sft", "grpo", "inspect"],
        help="inspect: one inspection turn with the agent's TransformersPolicy, then several at once",
    )
    parser.add_argument(
        "--serve-batches",
        type=int,
        nargs="+",
        default=[1, 8, 32],
        help="conversations generated at once in the inspect stage",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    options = make_parser().parse_args(argv)
    if options.steps < 1:
        raise SystemExit("--steps must be >= 1")
    if not 1 <= options.tool_turns <= 8:
        raise SystemExit("--tool-turns must be between 1 and 8")
    report = run_smoke(
        options.sizes,
        options.out,
        steps=options.steps,
        cpu=options.cpu,
        tool_turns=options.tool_turns,
        report_path=options.report,
        stages=options.stages,
        serve_batches=options.serve_batches,
    )
    print(format_report(report))
    return report


if __name__ == "__main__":
    main()
