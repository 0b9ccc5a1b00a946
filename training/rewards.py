"""GRPO rewards, computed with ``agent.parsing`` so the loop, evaluation and reward never disagree.

Both rewards follow TRL's contract ``fn(completions, **kwargs) -> list[float]``; TRL passes every
dataset column (``ground_truth``, ``task``) plus ``completion_ids`` and ``log_metric``.

What the parser reads: the raw text of each assistant turn. TRL's ``completions`` are *parsed*
messages (with the Qwen3 response template ``<think>`` goes to ``reasoning_content`` and the call
to ``tool_calls``; text before ``<think>`` is dropped and blocks are put back in a canonical order,
so a badly formatted turn can look well formed), so the exact text is rebuilt from ``completion_ids`` when a
tokenizer is bound (``build_reward`` does this for training): the ids hold turn 1, then for each
tool round ``<|im_end|>`` + the tool-response user turn + ``<|im_end|>`` + ``\\n<|im_start|>assistant\\n``
+ the next turn. Without a tokenizer (unit tests, doctests) the turns are rebuilt from the
messages: ``<think>reasoning</think>`` + content + each call as compact JSON in ``<tool_call>``,
which is exact for a message that still has its raw ``content``.

- ``spec_o3_reward``: paper eq. 3 (seed 000): 1 correct with good format, 1 - alpha correct with
  bad format, 0 wrong with good format, -alpha wrong with bad format; f_fmt is
  ``agent.parsing.format_ok`` and the prediction ``agent.parsing.extract_prediction``.
- ``spectra_reward``: SPECTRA eqs. 5-11 (seed 002) with Table 8 constants, adapted to one tool:
  R_corr = C1 [pred = gt]; R_struct = alpha gamma^phi with phi 0 for a well-formed rollout whose
  tool showed at least one plot (reason, tool, observation, reason, answer), 1 when tools were
  called but no plot came back (the "missing perception" case the paper names), 2 for a
  well-formed direct answer, and 0 reward for anything else; R_tool = K_syntax (every call turn
  holds an error-free executable call, at least one call) + K_success (every tool response
  showed a plot, at least one) + R_div, where the "tools" of eq. 9 are the task's diagnostic
  windows a call looked at (``agent.evaluation.window_kind``, as the evaluation's TSS does);
  R_term = C2 [the last turn holds an <answer>]. R = S (sum of lambda_i R_i) / N_norm.
"""

from __future__ import annotations

import functools
import json
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from agent import metrics, parsing
from agent.evaluation import window_kind
from agent.inspection_tasks import get_task
from training.environment import TURN_ARGUMENT

END_OF_TURN = "<|im_end|>"
ASSISTANT_HEADER = "<|im_start|>assistant\n"
USER_HEADER = "<|im_start|>user\n"
TOOL_RESPONSE_TAG = "<tool_response>"
VISION_START = "<|vision_start|>"
DEFAULT_ALPHA = 0.2


@dataclass(frozen=True)
class Rollout:
    """What a reward needs of one GRPO completion."""

    turns: list[str]  # raw assistant turn texts, in order
    tool_images: list[bool]  # one per tool response: did it show a plot?


# --- reading completions -----------------------------------------------------------------------


def rollout_from_text(text: str) -> Rollout:
    """Split a decoded completion (special tokens kept) into assistant turns and tool responses."""
    segments = text.split(END_OF_TURN)
    turns = [segments[0]]
    tool_images: list[bool] = []
    for position, segment in enumerate(segments[1:], start=1):
        body = segment.removeprefix("\n")
        if body.startswith(ASSISTANT_HEADER):
            turns.append(body[len(ASSISTANT_HEADER) :])
        elif body.startswith(USER_HEADER):
            responses = body.split(TOOL_RESPONSE_TAG)[1:]
            tool_images.extend(VISION_START in response for response in responses)
        elif segment or position < len(segments) - 1:
            raise ValueError(
                f"completion segment {position} is neither a tool response nor an assistant turn: "
                f"{segment[:60]!r}"
            )
    return Rollout(turns, tool_images)


def rollout_from_ids(completion_ids: Sequence[int], tokenizer: Any) -> Rollout:
    """The exact turns the model generated, from TRL's completion ids (tool tokens included)."""
    return rollout_from_text(tokenizer.decode(list(completion_ids), skip_special_tokens=False))


def rollout_from_messages(completion: Sequence[dict[str, Any]]) -> Rollout:
    """Turns rebuilt from TRL's parsed completion messages (see the module docstring)."""
    turns: list[str] = []
    tool_images: list[bool] = []
    for message in completion:
        if message.get("role") == "assistant":
            turns.append(_assistant_text(message))
        elif message.get("role") == "tool":
            content = message.get("content")
            tool_images.append(
                isinstance(content, list)
                and any(isinstance(part, dict) and part.get("type") == "image" for part in content)
            )
        else:
            raise ValueError(f"unexpected role {message.get('role')!r} in a completion")
    return Rollout(turns, tool_images)


def _assistant_text(message: dict[str, Any]) -> str:
    pieces = []
    if message.get("reasoning_content"):
        pieces.append(f"<think>{message['reasoning_content']}</think>")
    content = message.get("content") or ""
    if isinstance(content, list):
        content = "".join(part.get("text", "") for part in content if part.get("type") == "text")
    pieces.append(content)
    for call in message.get("tool_calls") or []:
        function = call.get("function", call)
        if TURN_ARGUMENT in (function.get("arguments") or {}):  # the raw turn is the content
            continue
        payload = {"name": function.get("name"), "arguments": function.get("arguments")}
        pieces.append(f"<tool_call>{json.dumps(payload, ensure_ascii=False)}</tool_call>")
    return "".join(pieces)


def read_rollouts(
    completions: Sequence[Any],
    completion_ids: Sequence[Sequence[int]] | None = None,
    tokenizer: Any = None,
) -> list[Rollout]:
    """One Rollout per completion: from the ids when a tokenizer is given, else the messages."""
    if tokenizer is not None and completion_ids is not None:
        if len(completion_ids) != len(completions):
            raise ValueError(
                f"{len(completion_ids)} completion_ids for {len(completions)} completions"
            )
        return [rollout_from_ids(ids, tokenizer) for ids in completion_ids]
    return [
        Rollout([completion], [])
        if isinstance(completion, str)
        else rollout_from_messages(completion)
        for completion in completions
    ]


# --- paper eq. 3 ---------------------------------------------------------------------------------


def spec_o3_value(correct: bool, format_good: bool, alpha: float = DEFAULT_ALPHA) -> float:
    """Paper eq. 3 for one trajectory."""
    if correct:
        return 1.0 if format_good else 1.0 - alpha
    return 0.0 if format_good else -alpha


def spec_o3_reward(
    completions: Sequence[Any],
    ground_truth: Sequence[str],
    *,
    alpha: float = DEFAULT_ALPHA,
    max_tool_calls: int | None = parsing.DEFAULT_MAX_TOOL_CALLS,
    tokenizer: Any = None,
    completion_ids: Sequence[Sequence[int]] | None = None,
    log_metric: Callable[[str, float], None] | None = None,
    **kwargs: Any,
) -> list[float]:
    """Spec-o3 outcome reward (paper eq. 3): accuracy first, minus alpha for a format violation.

    >>> good = "<think>Broad H-alpha.</think><answer>\\\\boxed{YES} broad Balmer lines.</answer>"
    >>> bad = "<answer>\\\\boxed{YES} no reasoning given.</answer>"
    >>> spec_o3_reward(
    ...     [[{"role": "assistant", "content": good}], [{"role": "assistant", "content": bad}]],
    ...     ground_truth=["YES", "NO"],
    ... )
    [1.0, -0.2]
    """
    rollouts = read_rollouts(completions, completion_ids, tokenizer)
    _check_lengths(rollouts, ground_truth)
    predictions = [parsing.extract_prediction(rollout.turns) for rollout in rollouts]
    formats = [
        parsing.format_ok(rollout.turns, max_tool_calls=max_tool_calls).ok for rollout in rollouts
    ]
    rewards = [
        spec_o3_value(prediction == label, good, alpha)
        for prediction, label, good in zip(predictions, ground_truth, formats, strict=True)
    ]
    _log_batch(
        log_metric,
        ground_truth,
        predictions,
        formats,
        rollouts,
        kwargs.get("environments"),
        completions,
    )
    return rewards


# --- SPECTRA eqs. 5-11 ---------------------------------------------------------------------------


@dataclass(frozen=True)
class SpectraRewardWeights:
    """SPECTRA reward constants; defaults are Table 8 of seed 002."""

    lambda_correct: float = 1.0
    lambda_struct: float = 1.0
    lambda_tool: float = 2.0
    lambda_term: float = 3.0
    c1: float = 8.0
    c2: float = 2.0
    alpha: float = 2.0
    beta: float = 0.1
    gamma: float = 0.75
    eta: float = 0.8
    kappa: int = 2
    scale: float = 2.5
    n_norm: float = 21.6  # = 1*8 + 1*2 + 2*(1 + 1 + 0.8) + 3*2, the largest raw reward


@dataclass(frozen=True)
class SpectraComponents:
    correctness: float
    structure: float
    tool: float
    termination: float
    total: float  # the scaled, normalised reward of eq. 11


def structure_level(turns: Sequence[str], tool_images: Sequence[bool]) -> int | None:
    """phi of eq. 7 in the one-tool adaptation (module docstring); None when no template fits."""
    if not parsing.format_ok(turns, max_tool_calls=None).ok:
        return None
    if any(tool_images):
        return 0
    calls = sum(1 for turn in turns if parsing.parse_turn(turn).kind == "tool_call")
    return 1 if calls else 2


def spectra_components(
    rollout: Rollout,
    label: str,
    task: str | None,
    weights: SpectraRewardWeights = SpectraRewardWeights(),
) -> SpectraComponents:
    parsed = [parsing.parse_turn(turn) for turn in rollout.turns]
    correct = parsing.extract_prediction(rollout.turns) == label
    r_corr = weights.c1 * correct

    phi = structure_level(rollout.turns, rollout.tool_images)
    r_struct = 0.0 if phi is None else weights.alpha * weights.gamma**phi

    call_turns = [turn for turn in parsed if turn.kind in ("tool_call", "invalid")]
    syntax = bool(call_turns) and all(_call_is_clean(turn) for turn in call_turns)
    success = bool(rollout.tool_images) and all(rollout.tool_images)
    executed = [turn.tool_call for turn in call_turns if turn.kind == "tool_call"]
    executed = executed[: len(rollout.tool_images)]  # calls past the last response never ran
    r_tool = float(syntax) + float(success) + _diversity(executed, task, weights)

    r_term = weights.c2 * (bool(parsed) and parsed[-1].answer is not None)
    raw = (
        weights.lambda_correct * r_corr
        + weights.lambda_struct * r_struct
        + weights.lambda_tool * r_tool
        + weights.lambda_term * r_term
    )
    return SpectraComponents(r_corr, r_struct, r_tool, r_term, weights.scale * raw / weights.n_norm)


def _call_is_clean(turn: parsing.ParsedTurn) -> bool:
    call = turn.tool_call
    return call is not None and call.executable and not parsing.parse_tool_call(call.raw)[1]


def _diversity(
    calls: Sequence[parsing.ToolCall | None], task: str | None, weights: SpectraRewardWeights
) -> float:
    """Eq. 9 with the task's diagnostic windows as the tool kinds (one kind without a task)."""
    resolved = get_task(task) if task else None
    kinds = Counter(
        window_kind(resolved, call.wavelength_range) if resolved else "tool"
        for call in calls
        if call is not None
    )
    total = sum(weights.beta * min(count, weights.kappa) for count in kinds.values())
    return min(weights.eta, total)


def spectra_reward(
    completions: Sequence[Any],
    ground_truth: Sequence[str],
    *,
    task: Sequence[str] | None = None,
    weights: SpectraRewardWeights = SpectraRewardWeights(),
    tokenizer: Any = None,
    completion_ids: Sequence[Sequence[int]] | None = None,
    log_metric: Callable[[str, float], None] | None = None,
    **kwargs: Any,
) -> list[float]:
    """SPECTRA multi-objective reward (seed 002 eqs. 5-11), one-tool adaptation.

    >>> answer = "<think>No emission at all.</think><answer>\\\\boxed{NO} absorption only.</answer>"
    >>> rewards = spectra_reward([[{"role": "assistant", "content": answer}]], ground_truth=["NO"])
    >>> [round(reward, 4) for reward in rewards]  # 2.5 * (8 + 2 * 0.75**2 + 3 * 2) / 21.6
    [1.7506]
    """
    rollouts = read_rollouts(completions, completion_ids, tokenizer)
    _check_lengths(rollouts, ground_truth)
    tasks: list[str | None] = list(task) if task is not None else [None] * len(rollouts)
    components = [
        spectra_components(rollout, label, code, weights)
        for rollout, label, code in zip(rollouts, ground_truth, tasks, strict=True)
    ]
    predictions = [parsing.extract_prediction(rollout.turns) for rollout in rollouts]
    formats = [parsing.format_ok(rollout.turns).ok for rollout in rollouts]
    _log_batch(
        log_metric,
        ground_truth,
        predictions,
        formats,
        rollouts,
        kwargs.get("environments"),
        completions,
    )
    return [part.total for part in components]


# --- helpers -------------------------------------------------------------------------------------


def _check_lengths(rollouts: Sequence[Rollout], ground_truth: Sequence[str]) -> None:
    if len(rollouts) != len(ground_truth):
        raise ValueError(f"{len(ground_truth)} ground truths for {len(rollouts)} completions")
    bad = sorted({label for label in ground_truth if label not in parsing.PREDICTIONS})
    if bad:
        raise ValueError(f"ground_truth must be YES or NO; got {bad}")


def _log_batch(
    log_metric: Callable[[str, float], None] | None,
    labels: Sequence[str],
    predictions: Sequence[str | None],
    formats: Sequence[bool],
    rollouts: Sequence[Rollout],
    environments: Sequence[Any] | None = None,
    completions: Sequence[Any] | None = None,
) -> None:
    """Training-batch classification metrics (F1 on the rollouts of this step) and tool use."""
    if log_metric is None:
        return
    log_tool_metrics(log_metric, environments, completions)
    report = metrics.classification_report(list(labels), list(predictions))
    log_metric("batch_f1", report.f1)
    log_metric("batch_accuracy", report.accuracy)
    log_metric("format_ok_rate", sum(formats) / len(formats))
    log_metric("turns_mean", sum(len(r.turns) for r in rollouts) / len(rollouts))


def log_tool_metrics(
    log_metric: Callable[[str, float], None],
    environments: Sequence[Any] | None,
    completions: Sequence[Any] | None = None,
) -> None:
    """``tool_calls_mean`` (calls the tool ran, per rollout) and ``tool_failure_rate`` (share of
    observations without a plot: refused windows, malformed turns, a disabled tool; rule 4 of
    ``agent.rollout_rules``), read from the environments' records.

    Only observations that reached the rollout count: TRL runs the tool, then drops a result
    whose tokens would pass ``max_completion_length`` (the tool message is deleted from the
    completion, the rollout ends), while the environment has already recorded the call. The
    ``tool`` messages left in each conversational completion say how many of the environment's
    records, in order, the model saw.

    TRL averages each logged name over its values on all ranks, so the failure rate is logged as
    one 0/1 value per observation: the average is then the pooled rate over the whole batch.
    """
    if not environments:
        return
    kept = [
        list(env.calls[: _observations_in(completions[index])])
        if completions is not None and index < len(completions)
        else list(env.calls)
        for index, env in enumerate(environments)
    ]
    ran = sum(1 for calls in kept for call in calls if call.ran_tool)
    log_metric("tool_calls_mean", ran / len(environments))
    for calls in kept:
        for call in calls:
            log_metric("tool_failure_rate", 0.0 if call.ok else 1.0)


def _observations_in(completion: Any) -> int:
    """The tool messages of a conversational completion (no limit for a plain-text one)."""
    if not isinstance(completion, list):
        return sys.maxsize
    return sum(1 for message in completion if message.get("role") == "tool")


def build_reward(
    name: str,
    *,
    tokenizer: Any,
    alpha: float = DEFAULT_ALPHA,
    max_tool_calls: int | None = parsing.DEFAULT_MAX_TOOL_CALLS,
    weights: SpectraRewardWeights | None = None,
) -> Callable[..., list[float]]:
    """The reward function for GRPOTrainer, bound to the tokenizer that decodes completion ids."""
    if name == "spec_o3":
        return functools.partial(
            spec_o3_reward, alpha=alpha, max_tool_calls=max_tool_calls, tokenizer=tokenizer
        )
    if name == "spectra":
        return functools.partial(
            spectra_reward, weights=weights or SpectraRewardWeights(), tokenizer=tokenizer
        )
    raise ValueError(f"unknown reward {name!r}; use 'spec_o3' or 'spectra'")
