"""The inspection loop of paper Algorithm 1.

Render I0 over the full range, then alternate: the policy writes a turn; a tool call is run (at
most one per turn) and its image appended; an answer ends the episode. A malformed or failing
call never crashes the episode: the policy gets an observation saying what was wrong and what
it can do instead (the SPECTRA/DeepEyes recovery), and the trajectory records it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

from agent import parsing
from agent.spectra import Spectrum
from agent.tasks import Task, build_prompt, system_prompt
from agent.tool import SpectralVisualizationTool
from agent.trajectory import (
    ImageRef,
    SpectrumRef,
    Step,
    ToolResponse,
    Trajectory,
    to_messages,
)

StepCallback = Callable[[Step, Trajectory], None]

# Turns that neither call the tool nor answer still cost a model call; bound them.
EXTRA_TURNS = 4

TOOL_DISABLED_TEXT = (
    "The spectral_visualization_tool is disabled in this run. Answer from the full-range "
    "image you already have: <answer>\\boxed{YES} or \\boxed{NO} followed by your justification"
    "</answer>."
)
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


def _feedback_for(parsed: parsing.ParsedTurn) -> str:
    """An observation the model can act on after a turn the loop could not use."""
    problems = "; ".join(parsed.errors) if parsed.errors else "no tool call and no answer found"
    return (
        f"Your last turn could not be used: {problems}. Continue with <think>...</think> and "
        'either one call such as <tool_call>{"name": "spectral_visualization_tool", '
        '"arguments": {"wavelength_range": [6500, 6650], "label": "H-alpha"}}</tool_call> '
        "or your final <answer>\\boxed{YES} or \\boxed{NO} justification</answer>."
    )


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
) -> Trajectory:
    """Run one episode and return its trajectory.

    With ``use_tool=False`` (the ablation of paper Table 4) the model sees I0 only and any
    tool call is answered with a notice that the tool is disabled.
    """
    if max_tool_calls < 0:
        raise ValueError(f"max_tool_calls must be >= 0, got {max_tool_calls}")
    tool = tool or SpectralVisualizationTool(spectrum)
    initial = tool.render_full()
    if not initial.ok or initial.png is None:
        raise ValueError(f"cannot render {spectrum.object_id or spectrum.source}: {initial.text}")
    prompt = build_prompt(task) + ("" if use_tool else NO_TOOL_PROMPT_NOTE)
    trajectory = Trajectory.new(
        task=task.code,
        spectrum=SpectrumRef.from_spectrum(spectrum),
        system_prompt=system_prompt(),
        user_prompt=prompt,
        initial_image=ImageRef(initial.png, initial.wavelength_range, None),
        policy=policy.info(),
        meta={"max_tool_calls": max_tool_calls, "use_tool": use_tool, **(meta or {})},
    )
    begin = getattr(policy, "begin", None)
    if callable(begin):
        begin(spectrum=spectrum, task=task, use_tool=use_tool, max_tool_calls=max_tool_calls)

    tool_calls = 0
    stop_reason = "max_turns"
    for index in range(max_tool_calls + 1 + EXTRA_TURNS):
        started = time.perf_counter()
        try:
            text = policy.generate(to_messages(trajectory))
        except Exception as error:  # any policy failure ends this episode, recorded, not raised
            trajectory.errors.append(
                f"policy failed at turn {index}: {type(error).__name__}: {error}"
            )
            stop_reason = "policy_error"
            break
        generate_s = time.perf_counter() - started
        usage = _usage(policy)
        parsed = parsing.parse_turn(text)

        response: ToolResponse | None = None
        tool_s: float | None = None
        finished = False
        if parsed.kind == "answer":
            stop_reason, finished = "answer", True
        elif parsed.tool_call is not None and parsed.tool_call.executable:
            if not use_tool:
                response = ToolResponse(ok=False, text=TOOL_DISABLED_TEXT)
            elif tool_calls >= max_tool_calls:
                stop_reason, finished = "tool_limit", True
            else:
                tool_started = time.perf_counter()
                result = tool.render(
                    parsed.tool_call.wavelength_range, label=parsed.tool_call.label
                )
                tool_s = time.perf_counter() - tool_started
                response = ToolResponse.from_tool_result(result)
                tool_calls += 1
        else:
            response = ToolResponse(ok=False, text=_feedback_for(parsed))

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
    elif stop_reason == "max_turns":
        trajectory.errors.append(f"stopped after {len(trajectory.steps)} turns without an answer")
    return trajectory
