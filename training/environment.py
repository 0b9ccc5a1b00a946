"""The GRPO environment: one spectrum per rollout, the agent's own tool and the agent's own rules.

``GRPOTrainer(environment_factory=...)`` builds a pool of instances, calls ``reset(**row)`` with
every column of the dataset row before each rollout, and exposes the public method
``spectral_visualization_tool`` as the one tool. TRL's tool loop and the inspection loop must
treat a model output alike, so the decision is not TRL's: ``install_agent_response_parser``
replaces the tokenizer's response parser (TRL calls ``tokenizer.parse_response`` on every
generated turn) and hands each turn that does not answer to this environment whole, as the
argument ``assistant_turn``; the environment applies ``agent.rollout_rules.TurnRules``, exactly as
``agent.rollout.inspect`` does (first call only, feedback on malformed turns, the same budget).
TRL's default parser would end a rollout on malformed JSON and run every call of a turn.

The rendering is ``agent.tool.SpectralVisualizationTool``, so a window looks the same in training
and at inference. An observation is ``[{"type": "image", "image": PIL}, {"type": "text", ...}]``
for a plot and ``[{"type": "text", ...}]`` otherwise; the chat template renders it as the same
user turn ``<tool_response>\\n[image]text\\n</tool_response>`` that SFT trajectories and the
inspection loop hold.
"""

from __future__ import annotations

import copy
import functools
import io
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agent import parsing
from agent.rollout_rules import TurnRules, ends_episode
from agent.tool import SpectralVisualizationTool
from training.data import spectrum_from_row

TURN_ARGUMENT = "assistant_turn"


@dataclass(frozen=True)
class ToolCallRecord:
    """One observation: the call it answered (None for a malformed turn) and what came back."""

    wavelength_range: list[float] | None  # the first call's range as given
    label: str
    ok: bool  # a plot came back
    text: str
    ran_tool: bool  # the tool rendered or refused a window (False: feedback or disabled notice)


class SpectrumInspectionEnv:
    """TRL environment for one inspection episode; ``calls`` records every observation."""

    def __init__(
        self, *, max_tool_calls: int = parsing.DEFAULT_MAX_TOOL_CALLS, use_tool: bool = True
    ) -> None:
        self.max_tool_calls = max_tool_calls
        self.use_tool = use_tool
        self._rules: TurnRules | None = None
        self.sample_id: str | None = None
        self.calls: list[ToolCallRecord] = []

    def reset(self, **row: Any) -> None:
        """Load the row's spectrum; the prompt already holds I0 and T0, so nothing is appended."""
        tool = SpectralVisualizationTool(spectrum_from_row(row))
        self._rules = TurnRules(tool, max_tool_calls=self.max_tool_calls, use_tool=self.use_tool)
        self.sample_id = row.get("sample_id")
        self.calls = []
        return None

    def spectral_visualization_tool(self, assistant_turn: str) -> list[dict[str, Any]]:
        """Answer one assistant turn that holds no answer: run its first call, or explain the problem.

        Args:
            assistant_turn: The whole assistant turn as generated, with its <tool_call> block.

        Returns:
            The plot image and a sentence on what it shows, or only a sentence saying why the
            window cannot be shown or why the turn could not be used, and what to do instead.
        """
        if self._rules is None:
            raise RuntimeError(
                "SpectrumInspectionEnv.reset() must load a spectrum before a tool call"
            )
        outcome = self._rules.respond(assistant_turn)
        if outcome.response is None:  # TRL's iteration cap equals the budget, so never here
            raise RuntimeError(
                f"turn not answerable by the tool (action {outcome.action!r}, "
                f"{self._rules.observed} of {self.max_tool_calls} observations used)"
            )
        response, call = outcome.response, outcome.parsed.tool_call
        self.calls.append(
            ToolCallRecord(
                wavelength_range=list(call.wavelength_range)
                if call is not None and call.wavelength_range is not None
                else None,
                label=(call.label or "") if call is not None else "",
                ok=response.image is not None,
                text=response.text,
                ran_tool=outcome.ran_tool,
            )
        )
        if response.image is None:
            return [{"type": "text", "text": response.text}]
        return [
            {"type": "image", "image": _pil(response.image.png)},
            {"type": "text", "text": response.text},
        ]

    @property
    def n_failed_calls(self) -> int:
        return sum(1 for call in self.calls if not call.ok)

    @property
    def n_tool_calls(self) -> int:
        """Calls the tool ran (the inspection loop's ``n_tool_calls``)."""
        return sum(1 for call in self.calls if call.ran_tool)


def environment_factory(*, max_tool_calls: int, use_tool: bool = True) -> Callable[[], Any]:
    """The ``environment_factory`` for GRPOTrainer, with the run's budget and tool switch."""
    return functools.partial(
        SpectrumInspectionEnv, max_tool_calls=max_tool_calls, use_tool=use_tool
    )


def agent_response(tokenizer: Any, ids: list[int], **_: Any) -> dict[str, Any]:
    """A generated turn as TRL's assistant message: the raw text, and for a turn that does not
    answer one call carrying the whole turn to the environment (see the module docstring)."""
    text = parsing.strip_special_tokens(tokenizer.decode(list(ids), skip_special_tokens=False))
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if not ends_episode(text):
        function = {"name": parsing.TOOL_NAME, "arguments": {TURN_ARGUMENT: text}}
        message["tool_calls"] = [{"type": "function", "function": function}]
    return message


def install_agent_response_parser(tokenizer: Any) -> Any:
    """Make ``tokenizer.parse_response`` (what TRL's tool loop calls) follow the agent's rules.

    TRL only parses responses when the tokenizer has a ``response_template``; the Qwen3 one is
    kept for that check and for serialization, and this instance attribute shadows the parser.
    """
    from trl.chat_template_utils import qwen3_template

    tokenizer.response_template = copy.deepcopy(qwen3_template)
    tokenizer.parse_response = functools.partial(agent_response, tokenizer)
    return tokenizer


def _pil(png: bytes) -> Any:
    from PIL import Image

    with Image.open(io.BytesIO(png)) as image:
        return image.convert("RGB")
