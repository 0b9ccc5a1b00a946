"""The inspection loop of paper Algorithm 1.

Render I0 over the full range, then alternate: the policy writes a turn and
``agent.rollout_rules.TurnRules`` decides what follows (an answer ends the episode; any other turn
gets one observation: the plot of its first call, the tool's refusal, or feedback on a malformed
turn; the budget of ``max_tool_calls`` observations ends it). GRPO rollouts apply the very same
rules (``training.environment``), so training and inference treat an output alike.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from agent import parsing
from agent.inspection_tasks import Task, build_prompt, system_prompt
from agent.render import renderer_info
from agent.rollout_rules import TurnRules
from agent.spectra import Spectrum
from agent.tool import SpectralVisualizationTool
from agent.trajectory import (
    ImageRef,
    SpectrumRef,
    Step,
    Trajectory,
    to_messages,
)

StepCallback = Callable[[Step, Trajectory], None]

NO_TOOL_PROMPT_NOTE = (
    "\n\nIn this run no tool is available: reason from the image above and answer directly."
)


class Inspector(Protocol):
    """What the loop needs of a policy; `begin` is optional (the rule-based inspector has it)."""

    def generate(self, messages: list[dict[str, Any]]) -> str: ...

    def info(self) -> dict[str, Any]: ...


def _usage(policy: Any) -> dict[str, Any]:
    usage = getattr(policy, "last_usage", None)
    return usage if isinstance(usage, dict) else {}


@dataclass
class Generated:
    """What a driver sends back into an episode for one turn: the text, or the policy's error."""

    text: str | None
    seconds: float
    usage: dict[str, Any] = field(default_factory=dict)
    error: Exception | None = None


Episode = Generator[list[dict[str, Any]], Generated, Trajectory]


@dataclass(frozen=True)
class Opening:
    """A dataset's own first turn, shown instead of specvet's so scores stay comparable with
    the numbers its publishers report (SpecVI-Bench rows carry Spec-o3's prompt and I0).

    ``system_prompt`` and ``user_prompt`` replace specvet's prompts when given (the user prompt
    holds exactly one ``<image>``, where I0 is shown); ``image`` replaces specvet's rendering of
    I0. Tool observations are always rendered by specvet.
    """

    user_prompt: str | None = None
    system_prompt: str | None = None
    image: ImageRef | None = None

    @property
    def prompt_source(self) -> str:
        from_dataset = self.user_prompt is not None or self.system_prompt is not None
        return "dataset" if from_dataset else "specvet"

    @property
    def image_source(self) -> str:
        return "dataset" if self.image is not None else "specvet"


SPECVET_OPENING = Opening()


def inspect(
    spectrum: Spectrum,
    task: Task,
    policy: Inspector,
    *,
    max_tool_calls: int = parsing.DEFAULT_MAX_TOOL_CALLS,
    on_step: StepCallback | None = None,
    use_tool: bool = True,
    tool: SpectralVisualizationTool | None = None,
    meta: dict[str, Any] | None = None,
    opening: Opening | None = None,
) -> Trajectory:
    """Run one episode and return its trajectory.

    With ``use_tool=False`` (the ablation of paper Table 4) the model sees I0 only and any
    tool call is answered with a notice that the tool is disabled. ``opening`` shows a
    dataset's own prompt and I0 instead of specvet's (meta records which were used).
    """
    if max_tool_calls < 0:
        raise ValueError(f"max_tool_calls must be >= 0, got {max_tool_calls}")
    turns = start_episode(
        policy, spectrum=spectrum, task=task, use_tool=use_tool, max_tool_calls=max_tool_calls
    )
    run = episode(
        spectrum,
        task,
        policy,
        max_tool_calls=max_tool_calls,
        on_step=on_step,
        use_tool=use_tool,
        tool=tool,
        meta=meta,
        opening=opening,
        decision=getattr(turns, "decision", None),
    )
    try:
        messages = next(run)
        while True:
            messages = run.send(_generate_one(turns, messages, usage_of=policy))
    except StopIteration as finished:
        return finished.value


def start_episode(
    policy: Any,
    *,
    spectrum: Spectrum,
    task: Task,
    use_tool: bool = True,
    max_tool_calls: int = parsing.DEFAULT_MAX_TOOL_CALLS,
) -> Any:
    """What writes this episode's turns: the object the policy's ``begin`` makes for this
    episode alone (``agent.policies.base.EpisodeTurns``), or the policy itself when it keeps no
    per-episode state. Nothing of one episode is left on a policy that other episodes share."""
    begin = getattr(policy, "begin", None)
    if not callable(begin):
        return policy
    turns = begin(spectrum=spectrum, task=task, use_tool=use_tool, max_tool_calls=max_tool_calls)
    if not callable(getattr(turns, "generate", None)):
        raise TypeError(
            f"{type(policy).__name__}.begin must return the episode's turn writer (an object "
            f"with generate(messages)); got {type(turns).__name__}"
        )
    return turns


def decision_record(decision: Any) -> dict[str, Any] | None:
    """A policy's own decision for an episode as its trajectory keeps it (JSON values only):
    verdict, confidence, score and the evidence behind them."""
    if not isinstance(decision, dict):
        return None
    return dict(json.loads(json.dumps(decision, allow_nan=False)))


def trajectory_confidence(trajectory: Trajectory) -> float | None:
    """The policy's confidence in its answer, as recorded with this very trajectory."""
    decision = trajectory.meta.get("decision")
    if not isinstance(decision, dict):
        return None
    confidence = decision.get("confidence")
    if isinstance(confidence, bool) or not isinstance(confidence, int | float):
        return None
    return float(confidence)


def inspect_batch(
    items: Sequence[tuple[Spectrum, Task]],
    policy: Any,
    *,
    max_tool_calls: int = parsing.DEFAULT_MAX_TOOL_CALLS,
    use_tool: bool = True,
    metas: Sequence[dict[str, Any] | None] | None = None,
    keep_going: Callable[[bool], bool] | None = None,
    openings: Sequence[Opening | None] | None = None,
) -> list[Trajectory]:
    """Run several episodes turn-synchronously: each round sends every unfinished episode's
    conversation to ``policy.generate_batch`` in one call (vLLM batches them on the GPU).

    ``keep_going(local_active)`` lets data-parallel ranks run the same number of rounds (it
    returns whether any rank still has an episode); a rank with none left still calls
    ``generate_batch([])`` so collective operations inside generation stay matched.
    """
    metas = list(metas) if metas is not None else [None] * len(items)
    openings = list(openings) if openings is not None else [None] * len(items)
    runs = [
        episode(
            spectrum,
            task,
            policy,
            max_tool_calls=max_tool_calls,
            use_tool=use_tool,
            meta=meta,
            opening=opening,
        )
        for (spectrum, task), meta, opening in zip(items, metas, openings, strict=True)
    ]
    results: list[Trajectory | None] = [None] * len(runs)
    pending = {index: next(run) for index, run in enumerate(runs)}
    while True:
        if keep_going is not None and not keep_going(bool(pending)):
            break
        if keep_going is None and not pending:
            break
        order = sorted(pending)
        started = time.perf_counter()
        try:
            texts: list[str] | None = list(policy.generate_batch([pending[i] for i in order]))
            error = None
        except Exception as failure:  # recorded on every episode of the round, not raised
            texts, error = None, failure
        seconds = (time.perf_counter() - started) / max(len(order), 1)
        usages = list(getattr(policy, "last_batch_usage", None) or [])
        for position, index in enumerate(order):
            usage = usages[position] if len(usages) == len(order) else {}
            text = texts[position] if texts is not None else None
            try:
                pending[index] = runs[index].send(Generated(text, seconds, usage, error))
            except StopIteration as finished:
                results[index] = finished.value
                del pending[index]
    return [result for result in results if result is not None]


def _generate_one(turns: Any, messages: list[dict[str, Any]], *, usage_of: Any = None) -> Generated:
    """One turn from ``turns``; its usage is read in this thread right after (policies keep it
    per thread: ``agent.policies.base.PerThreadUsage``)."""
    started = time.perf_counter()
    try:
        text = turns.generate(messages)
    except Exception as error:  # any policy failure ends the episode, recorded, not raised
        return Generated(None, time.perf_counter() - started, error=error)
    return Generated(text, time.perf_counter() - started, _usage(usage_of or turns))


def episode(
    spectrum: Spectrum,
    task: Task,
    policy: Inspector,
    *,
    max_tool_calls: int = parsing.DEFAULT_MAX_TOOL_CALLS,
    on_step: StepCallback | None = None,
    use_tool: bool = True,
    tool: SpectralVisualizationTool | None = None,
    meta: dict[str, Any] | None = None,
    opening: Opening | None = None,
    decision: dict[str, Any] | None = None,
) -> Episode:
    """One episode as a generator: it yields the conversation for the next turn, receives the
    ``Generated`` turn, and returns the trajectory (drivers: ``inspect``, ``inspect_batch``).

    The driver writes the turns (``start_episode``); ``decision`` is what the policy decided for
    this episode, recorded with its trajectory. The trajectory records what determines it: the
    spectrum's digest, the policy's info and the renderer."""
    if max_tool_calls < 0:
        raise ValueError(f"max_tool_calls must be >= 0, got {max_tool_calls}")
    tool = tool or SpectralVisualizationTool(spectrum)
    rules = TurnRules(tool, max_tool_calls=max_tool_calls, use_tool=use_tool)
    opening = opening or SPECVET_OPENING
    if opening.image is not None:
        initial_image = opening.image
    else:
        initial = tool.render_full()
        if not initial.ok or initial.png is None:
            raise ValueError(
                f"cannot render {spectrum.object_id or spectrum.source}: {initial.text}"
            )
        initial_image = ImageRef(initial.png, initial.wavelength_range, None)
    user_prompt = build_prompt(task) if opening.user_prompt is None else opening.user_prompt
    trajectory = Trajectory.new(
        task=task.code,
        spectrum=SpectrumRef.from_spectrum(spectrum),
        system_prompt=system_prompt() if opening.system_prompt is None else opening.system_prompt,
        user_prompt=user_prompt + ("" if use_tool else NO_TOOL_PROMPT_NOTE),
        initial_image=initial_image,
        policy=policy.info(),
        meta={
            "max_tool_calls": max_tool_calls,
            "use_tool": use_tool,
            "renderer": renderer_info(tool.size),
            "prompt_source": opening.prompt_source,
            "initial_image_source": opening.image_source,
            "spectrum_sha256": spectrum.digest(),
            **(meta or {}),
        },
    )
    recorded = decision_record(decision)
    if recorded is not None:
        trajectory.meta["decision"] = recorded

    stop_reason = "tool_limit"
    # One model call per observation plus the turn after the last one, which answers or stops.
    for index in range(max_tool_calls + 1):
        generated = yield to_messages(trajectory)
        if generated.error is not None or generated.text is None:
            error = generated.error
            trajectory.errors.append(
                f"policy failed at turn {index}: {type(error).__name__}: {error}"
            )
            stop_reason = "policy_error"
            break
        text, generate_s, usage = generated.text, generated.seconds, generated.usage
        outcome = rules.respond(text)
        parsed, response, tool_s = outcome.parsed, outcome.response, outcome.tool_s
        finished = outcome.action != "observe"
        if outcome.action == "answer":
            stop_reason = "answer"
        elif outcome.action == "stop":
            stop_reason = "tool_limit"

        step = Step(
            index=index,
            assistant_text=text,
            think=parsed.think,
            tool_call=parsed.tool_call,
            tool_result=response,
            generate_s=generate_s,
            tool_s=tool_s,
            prompt_tokens=usage.get("prompt_tokens"),
            completion_tokens=usage.get("completion_tokens"),
        )
        trajectory.steps.append(step)
        if on_step is not None:
            on_step(step, trajectory)
        if finished:
            break
    trajectory.finalize(stop_reason)
    if stop_reason == "tool_limit":
        trajectory.errors.append(
            f"stopped at the tool-call limit ({max_tool_calls}) without an answer"
        )
    return trajectory
