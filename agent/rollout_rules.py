"""What happens after an assistant turn: the one set of tool-call rules of specvet.

The inspection loop (``agent.rollout.inspect``, used by evaluation, live inspections and the
validation F1 of training) and GRPO rollouts (``training.environment``, driven by TRL's tool loop)
both hand each assistant turn to :meth:`TurnRules.respond`, so a model output gets the same
treatment in training and at inference:

1. A turn holding an ``<answer>`` ends the episode; a tool call in the same turn never runs.
2. Any other turn gets exactly one observation, and the episode continues:
   - an executable call runs the tool: a plot, or the tool's refusal text when it cannot show
     the window (outside coverage, too narrow, ...);
   - with the tool disabled (the no-tool ablation) a notice that it is disabled;
   - anything else (malformed JSON, an unknown tool, no call and no answer) gets feedback naming
     the problems and showing a well-formed call.
   With two or more ``<tool_call>`` blocks in one turn only the first runs (and the turn fails
   the format check of paper eq. 3, see ``agent.parsing``).
3. Every observation uses one of ``max_tool_calls`` (paper Algorithm 1: 8). A turn without an
   answer once they are spent ends the episode with stop reason ``tool_limit``. In GRPO this is
   TRL's ``max_tool_calling_iterations``, which counts the same tool rounds.
4. An observation that is not a plot is a failed tool call: refusals, feedback on malformed
   turns, the disabled-tool notice. ``tool_failure_rate`` is failed / all observations.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Literal

from agent import parsing
from agent.tool import SpectralVisualizationTool
from agent.trajectory import ToolResponse

TOOL_DISABLED_TEXT = (
    "The spectral_visualization_tool is disabled in this run. Answer from the full-range "
    "image you already have: <answer>\\boxed{YES} or \\boxed{NO} followed by your justification"
    "</answer>."
)

TurnAction = Literal["answer", "observe", "stop"]


@dataclass(frozen=True)
class TurnOutcome:
    """The decision for one assistant turn and, for ``observe``, what the model is shown."""

    action: TurnAction  # "answer": episode over; "observe": response follows; "stop": budget spent
    parsed: parsing.ParsedTurn
    response: ToolResponse | None = None
    ran_tool: bool = False  # the tool rendered (or refused) a window for this turn
    tool_s: float | None = None

    @property
    def failed(self) -> bool:
        """An observation without a plot (rule 4)."""
        return self.response is not None and self.response.image is None


def ends_episode(text: str) -> bool:
    """Rule 1 alone, for callers that must decide before any state exists (GRPO's parser)."""
    return parsing.parse_turn(text).kind == "answer"


def feedback_for(parsed: parsing.ParsedTurn) -> str:
    """The observation after a turn that neither answered nor held an executable call."""
    problems = "; ".join(parsed.errors) if parsed.errors else "no tool call and no answer found"
    return (
        f"Your last turn could not be used: {problems}. Continue with <think>...</think> and "
        'either one call such as <tool_call>{"name": "spectral_visualization_tool", '
        '"arguments": {"wavelength_range": [6500, 6650], "label": "H-alpha"}}</tool_call> '
        "or your final <answer>\\boxed{YES} or \\boxed{NO} justification</answer>."
    )


class TurnRules:
    """The rules above for one episode; ``observed`` counts the observations given so far."""

    def __init__(
        self,
        tool: SpectralVisualizationTool,
        *,
        max_tool_calls: int = parsing.DEFAULT_MAX_TOOL_CALLS,
        use_tool: bool = True,
    ) -> None:
        if max_tool_calls < 0:
            raise ValueError(f"max_tool_calls must be >= 0, got {max_tool_calls}")
        self.tool = tool
        self.max_tool_calls = max_tool_calls
        self.use_tool = use_tool
        self.observed = 0
        self.failed = 0

    def respond(self, text: str) -> TurnOutcome:
        parsed = parsing.parse_turn(text)
        if parsed.kind == "answer":
            return TurnOutcome("answer", parsed)
        if self.observed >= self.max_tool_calls:
            return TurnOutcome("stop", parsed)
        outcome = self._observe(parsed)
        self.observed += 1
        self.failed += int(outcome.failed)
        return outcome

    def _observe(self, parsed: parsing.ParsedTurn) -> TurnOutcome:
        call = parsed.tool_call
        if call is None or not call.executable:
            return TurnOutcome("observe", parsed, ToolResponse(ok=False, text=feedback_for(parsed)))
        if not self.use_tool:
            return TurnOutcome("observe", parsed, ToolResponse(ok=False, text=TOOL_DISABLED_TEXT))
        started = time.perf_counter()
        result = self.tool.render(call.wavelength_range, label=call.label)
        response = ToolResponse.from_tool_result(result)
        return TurnOutcome("observe", parsed, response, True, time.perf_counter() - started)

    @property
    def failure_rate(self) -> float | None:
        return self.failed / self.observed if self.observed else None
