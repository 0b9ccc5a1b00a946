"""The GRPO environment: one spectrum per rollout and the agent's own visualization tool.

``GRPOTrainer(environment_factory=SpectrumInspectionEnv)`` builds a pool of instances, calls
``reset(**row)`` with every column of the dataset row before each rollout, and exposes the public
method ``spectral_visualization_tool`` to the model as the tool (TRL reads its name, type hints
and docstring). The rendering is ``agent.tool.SpectralVisualizationTool``, the very tool the
inspection loop uses, so a window looks the same in training and at inference.

A tool result is ``[{"type": "image", "image": PIL}, {"type": "text", "text": ...}]``; a window
the tool refuses comes back as its text only. The chat template renders it as the same user turn
``<tool_response>\\n[image]text\\n</tool_response>`` that SFT trajectories hold.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Any

from agent.tool import SpectralVisualizationTool
from training.data import spectrum_from_row


@dataclass(frozen=True)
class ToolCallRecord:
    wavelength_range: Any  # as the model gave it
    label: str
    ok: bool
    text: str


class SpectrumInspectionEnv:
    """TRL environment for one inspection episode; ``calls`` records what the model asked for."""

    def __init__(self) -> None:
        self._tool: SpectralVisualizationTool | None = None
        self.sample_id: str | None = None
        self.calls: list[ToolCallRecord] = []

    def reset(self, **row: Any) -> None:
        """Load the row's spectrum; the prompt already holds I0 and T0, so nothing is appended."""
        self._tool = SpectralVisualizationTool(spectrum_from_row(row))
        self.sample_id = row.get("sample_id")
        self.calls = []
        return None

    def spectral_visualization_tool(
        self, wavelength_range: list[float], label: str = ""
    ) -> list[dict[str, Any]]:
        """Render the spectrum over one wavelength window and return the plot.

        Args:
            wavelength_range: The window [min, max] in Angstrom, rest frame when the redshift is known.
            label: Optional name of the feature being examined, for example H-alpha.

        Returns:
            The plot image and a sentence on what it shows, or only a sentence saying why the
            window cannot be shown and what to ask for instead.
        """
        if self._tool is None:
            raise RuntimeError(
                "SpectrumInspectionEnv.reset() must load a spectrum before a tool call"
            )
        result = self._tool.render(wavelength_range, label=label or None)
        self.calls.append(ToolCallRecord(wavelength_range, label, result.ok, result.text))
        if result.png is None:
            return [{"type": "text", "text": result.text}]
        return [{"type": "image", "image": _pil(result.png)}, {"type": "text", "text": result.text}]

    @property
    def n_failed_calls(self) -> int:
        return sum(1 for call in self.calls if not call.ok)


def _pil(png: bytes) -> Any:
    from PIL import Image

    with Image.open(io.BytesIO(png)) as image:
        return image.convert("RGB")
