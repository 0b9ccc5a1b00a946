"""Prefill tokens and seconds per episode with and without key-value cache reuse across turns
(``TransformersPolicy(reuse_cache=True)``, issue 24 item 7), on the tiny random Qwen2.5-VL on the
CPU. Each episode is an inspection opening (specvet's system prompt, I0 and T0 of a SpecVI-mini
spectrum) followed by tool plots of its diagnostic windows, one per turn, each answered by the
policy (greedy). Both policies must give the same tokens and, turn by turn, the same logits
(within ``LOGIT_TOLERANCE``) before any figure is printed.

The model is the tiny one with larger random weights (``SENSITIVE_MODEL``): its logits move with
the picture, so a reuse bug that feeds the wrong positions or pixels shows up in the logits (a
``rope_deltas`` shift of +7 moves them by ~10, where the default tiny model's greedy text is one
string for every plot and every turn and hid it). ``check_logits`` first measures how far the
first-token logits move between two spectra's pictures, and counts the comparison as
meaningless unless that is at least ``SENSITIVITY_FACTOR`` times the tolerance."""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

WINDOWS = ((6450.0, 6680.0), (4780.0, 4940.0), (4300.0, 4420.0), (3900.0, 4150.0))
# Hidden 64 with 2 heads (head_dim 32), random weights of std 0.3 instead of 0.02.
SENSITIVE_MODEL: dict[str, Any] = {
    "hidden_size": 64,
    "num_attention_heads": 2,
    "initializer_range": 0.3,
}
# Float32 on the CPU: reuse moves logits by ~2e-5 (other matmul shapes), a +7 rope shift by ~10.
LOGIT_TOLERANCE = 1e-3
SENSITIVITY_FACTOR = 10.0


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
    """Answer the opening, then each plot as a tool response; the texts, token counts, seconds
    and, when the policy records them, each turn's logits."""
    messages = list(opening)
    texts, prefill, prompt, logits = [], 0, 0, []
    started = time.perf_counter()
    for plot in [*plots, None]:
        text = policy.generate(messages)
        texts.append(text)
        if getattr(policy, "record_logits", False):
            logits.append(policy.last_logits)
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
        "logits": logits,
    }


@dataclass(frozen=True)
class LogitsCheck:
    """Logits with and without cache reuse, turn by turn, and how much the picture moves them."""

    differences: list[float]  # per turn (episodes in order): max |full - reuse| over new tokens
    text_mismatches: list[int]  # turns whose greedy text differs
    image_sensitivity: float  # max |first-token logits| between two spectra's openings
    tolerance: float = LOGIT_TOLERANCE

    @property
    def sensitive(self) -> bool:
        return self.image_sensitivity >= SENSITIVITY_FACTOR * self.tolerance

    @property
    def max_difference(self) -> float:
        return max(self.differences, default=0.0)

    @property
    def ok(self) -> bool:
        return self.sensitive and not self.text_mismatches and self.max_difference <= self.tolerance

    def verdict(self) -> str:
        figures = (
            f"max |logit difference| {self.max_difference:.3g} over {len(self.differences)} "
            f"turns (tolerance {self.tolerance:g}); pictures move the logits by "
            f"{self.image_sensitivity:.3g}"
        )
        if not self.sensitive:
            return (
                f"not checked: the model hardly sees the picture ({figures}; needs "
                f">= {SENSITIVITY_FACTOR:g}x the tolerance)"
            )
        if self.text_mismatches or self.max_difference > self.tolerance:
            return f"cache reuse changes the output: turns {self._bad_turns()} differ ({figures})"
        return f"cache reuse gives the same logits ({figures})"

    def _bad_turns(self) -> list[int]:
        over = {i for i, d in enumerate(self.differences) if d > self.tolerance}
        return sorted(over | set(self.text_mismatches))


def compare_logits(
    plain: list[dict[str, Any]],
    reusing: list[dict[str, Any]],
    *,
    tolerance: float = LOGIT_TOLERANCE,
    image_sensitivity: float,
) -> LogitsCheck:
    """The ``LogitsCheck`` of two ``run_episode`` result lists over the same episodes."""
    differences: list[float] = []
    mismatches: list[int] = []
    for a, b in zip(plain, reusing, strict=True):
        for text_a, text_b, logits_a, logits_b in zip(
            a["texts"], b["texts"], a["logits"], b["logits"], strict=True
        ):
            if text_a != text_b or logits_a.shape != logits_b.shape:
                mismatches.append(len(differences))
            shared = min(logits_a.shape[0], logits_b.shape[0])
            gap = (logits_a[:shared] - logits_b[:shared]).abs().max()
            differences.append(float(gap))
    return LogitsCheck(differences, mismatches, image_sensitivity, tolerance)


def image_sensitivity(
    policy: Any, episodes: list[tuple[list[dict[str, Any]], list[bytes]]]
) -> float:
    """How far the first-token logits move between the first two episodes' openings (the same
    text, another spectrum's picture)."""
    if len(episodes) < 2:
        raise ValueError("the sensitivity check needs two episodes (two spectra)")
    firsts = []
    for opening, _ in episodes[:2]:
        policy.generate(list(opening))
        firsts.append(policy.last_logits[0])
    return float((firsts[0] - firsts[1]).abs().max())


def check_logits(
    model_path: str | Path,
    episodes: list[tuple[list[dict[str, Any]], list[bytes]]],
    *,
    max_new_tokens: int = 8,
    tolerance: float = LOGIT_TOLERANCE,
) -> LogitsCheck:
    """Run ``episodes`` greedily with and without cache reuse (one policy each, the episodes
    one after another, so the reusing policy also meets a cache of another spectrum) and
    compare the logits of every new token."""
    from agent.policies.transformers_policy import TransformersPolicy

    sampling = {"temperature": 0.0, "max_new_tokens": max_new_tokens}
    runs = {}
    for reuse in (False, True):
        policy = TransformersPolicy(
            model_path, sampling=sampling, reuse_cache=reuse, record_logits=True
        )
        runs[reuse] = [run_episode(policy, *episode) for episode in episodes]
    probe = TransformersPolicy(model_path, sampling=sampling, record_logits=True)
    return compare_logits(
        runs[False],
        runs[True],
        tolerance=tolerance,
        image_sensitivity=image_sensitivity(probe, episodes),
    )


def sensitive_tiny_model(path: str | Path | None = None) -> Path:
    """The tiny Qwen2.5-VL whose logits follow the picture (``SENSITIVE_MODEL``)."""
    from agent.policies.tiny_qwen import build_tiny_qwen25vl

    target = Path(path) if path is not None else Path(tempfile.mkdtemp(prefix="specvet-kv-"))
    return build_tiny_qwen25vl(target, **SENSITIVE_MODEL)


def run_kv_reuse_benchmark(spectra: int, turns: int, max_new_tokens: int) -> dict[str, Any]:
    from agent.policies.transformers_policy import TransformersPolicy

    model = sensitive_tiny_model()
    sampling = {"temperature": 0.0, "max_new_tokens": max_new_tokens}
    episodes = episode_plots(max(spectra, 2), turns)
    results: dict[str, list[dict[str, Any]]] = {}
    for name, reuse in (("full prefill", False), ("cache reuse", True)):
        policy = TransformersPolicy(model, sampling=sampling, reuse_cache=reuse, record_logits=True)
        run_episode(policy, *episodes[0])  # warm-up, not timed
        results[name] = [run_episode(policy, *episode) for episode in episodes]
    plain, reusing = results["full prefill"], results["cache reuse"]
    probe = TransformersPolicy(model, sampling=sampling, record_logits=True)
    check = compare_logits(plain, reusing, image_sensitivity=image_sensitivity(probe, episodes))
    if not check.ok:
        raise AssertionError(check.verdict())
    summary: dict[str, Any] = {
        "spectra": len(episodes),
        "turns": turns + 1,
        "logits": check.verdict(),
    }
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
        summary["logits"],
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
