"""Prefill tokens and seconds per episode with and without key-value cache reuse across turns
(``TransformersPolicy(reuse_cache=True)``, issue 24 item 7), on the tiny random Qwen2.5-VL on the
CPU. Each episode is an inspection opening (specvet's system prompt, I0 and T0 of a SpecVI-mini
spectrum) followed by tool plots of its diagnostic windows, one per turn, each answered by the
policy (greedy). Both policies must give the same tokens before any figure is printed."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

WINDOWS = ((6450.0, 6680.0), (4780.0, 4940.0), (4300.0, 4420.0), (3900.0, 4150.0))


def episode_plots(n_spectra: int, turns: int) -> list[tuple[list[dict[str, Any]], list[bytes]]]:
    """(opening messages, tool plot PNGs) for ``n_spectra`` SpecVI-mini CV spectra."""
    from agent.inspection_tasks import build_prompt, get_task, system_prompt
    from agent.synthetic import generate_split
    from agent.tool import SpectralVisualizationTool

    task = get_task("CV")
    episodes = []
    for sample in generate_split("CV", "test", n_pos=n_spectra, n_neg=0, seed=0)[:n_spectra]:
        tool = SpectralVisualizationTool(sample.spectrum)
        i0 = tool.render_full().png
        plots = [tool.render(list(w), label="window").png for w in WINDOWS[:turns]]
        assert i0 is not None and all(plots)
        text = build_prompt(task).replace("<image>", "")
        opening: list[dict[str, Any]] = [
            {"role": "system", "content": [{"type": "text", "text": system_prompt()}]},
            {
                "role": "user",
                "content": [{"type": "image", "png": i0}, {"type": "text", "text": text}],
            },
        ]
        episodes.append((opening, [p for p in plots if p is not None]))
    return episodes


def run_episode(policy: Any, opening: list[dict[str, Any]], plots: list[bytes]) -> dict[str, Any]:
    messages = list(opening)
    texts, prefill, prompt = [], 0, 0
    started = time.perf_counter()
    for plot in [*plots, None]:
        text = policy.generate(messages)
        texts.append(text)
        prefill += policy.last_usage["prefill_tokens"]
        prompt += policy.last_usage["prompt_tokens"]
        messages.append({"role": "assistant", "content": [{"type": "text", "text": text}]})
        if plot is not None:
            messages.append(
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "<tool_response>\n"},
                        {"type": "image", "png": plot},
                        {"type": "text", "text": "window shown\n</tool_response>"},
                    ],
                }
            )
    return {
        "texts": texts,
        "prefill": prefill,
        "prompt": prompt,
        "seconds": time.perf_counter() - started,
    }


def run_kv_reuse_benchmark(spectra: int, turns: int, max_new_tokens: int) -> dict[str, Any]:
    from agent.policies.transformers_policy import TransformersPolicy
    from agent.policies.tiny_qwen import build_tiny_qwen25vl

    model = build_tiny_qwen25vl(
        Path(tempfile.mkdtemp(prefix="specvet-kv-")), hidden_size=64, num_attention_heads=2
    )
    sampling = {"temperature": 0.0, "max_new_tokens": max_new_tokens}
    episodes = episode_plots(spectra, turns)
    results: dict[str, list[dict[str, Any]]] = {}
    for name, reuse in (("full prefill", False), ("cache reuse", True)):
        policy = TransformersPolicy(model, sampling=sampling, reuse_cache=reuse)
        run_episode(policy, *episodes[0])  # warm-up, not timed
        results[name] = [run_episode(policy, *episode) for episode in episodes]
    plain, reusing = results["full prefill"], results["cache reuse"]
    mismatched = [
        i for i, (a, b) in enumerate(zip(plain, reusing, strict=True)) if a["texts"] != b["texts"]
    ]
    if mismatched:
        raise AssertionError(f"cache reuse changed the greedy output of episodes {mismatched}")
    summary: dict[str, Any] = {"spectra": spectra, "turns": turns + 1}
    for name, runs in results.items():
        summary[name] = {
            "prefill_tokens_per_episode": sum(r["prefill"] for r in runs) / len(runs),
            "prompt_tokens_per_episode": sum(r["prompt"] for r in runs) / len(runs),
            "seconds_per_episode": sum(r["seconds"] for r in runs) / len(runs),
        }
    return summary


def format_kv_reuse_report(summary: dict[str, Any]) -> str:
    plain, reusing = summary["full prefill"], summary["cache reuse"]
    lines = [
        f"{summary['spectra']} episodes of {summary['turns']} turns (greedy outputs identical)",
        f"{'':14} {'prefill tok/episode':>20} {'s/episode':>10}",
    ]
    for name in ("full prefill", "cache reuse"):
        row = summary[name]
        lines.append(
            f"{name:14} {row['prefill_tokens_per_episode']:>20.0f} {row['seconds_per_episode']:>10.3f}"
        )
    lines.append(
        f"ratio (full / reuse): prefill tokens "
        f"{plain['prefill_tokens_per_episode'] / reusing['prefill_tokens_per_episode']:.2f}x, "
        f"seconds {plain['seconds_per_episode'] / reusing['seconds_per_episode']:.2f}x"
    )
    return "\n".join(lines)
