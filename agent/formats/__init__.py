"""Converters between ``Trajectory`` and the public layouts, both ways.

- TRL conversational examples (ml_path.md section 1): ``{"messages", "images"}`` with
  ``{"type": "image"}`` placeholders filled from ``images`` in order; tool results are user turns.
- LLaMA-Factory ShareGPT rows of the Spec-o3 cold-start set: ``conversations`` of
  system/human/gpt turns whose text holds ``<image>`` placeholders, tool results as human turns
  wrapped in ``<tool_response>...</tool_response>``, ``images`` as relative paths,
  ``source_name``, ``sample_index``, ``ground_truth``.
- SpecVI-Bench / verl parquet rows (common.md): a prompt, I0 and the spectrum arrays in
  ``extra_info.tools_kwargs``; our extra provenance lives in ``extra_info["specvet"]``, which
  verl ignores, so ivar, mask and survey metadata survive a round trip.

All three reduce to the same conversation: a system text, then (role, text) turns where
``<image>`` marks each image, and the images in order (``trajectory.conversation_turns``).
Written rows use the canonical tool-response text ``<tool_response>\n<image>TEXT\n</tool_response>``;
read rows may vary in the whitespace around the wrapper and the image.

One module per layout: ``trl``, ``sharegpt``, ``verl``; ``common`` holds what they share.
"""

from __future__ import annotations

from agent.formats.common import (
    SHAREGPT_IMAGE_DIR,
    SPECVI_TO_TASK,
    TASK_TO_SPECVI,
    VERL_ABILITY,
    VERL_TOOL_NAME,
    DatasetFormatError,
    infer_task,
    parse_tool_response,
    specvi_code,
    task_code,
)
from agent.formats.sharegpt import (
    cold_start_warnings,
    from_sharegpt_row,
    load_sharegpt_file,
    to_sharegpt_row,
    write_sharegpt_file,
)
from agent.formats.trl import (
    from_trl_example,
    to_trl_example,
)
from agent.formats.verl import (
    from_verl_row,
    read_verl_parquet,
    to_verl_row,
    write_verl_parquet,
)

__all__ = [
    "SPECVI_TO_TASK",
    "TASK_TO_SPECVI",
    "VERL_ABILITY",
    "VERL_TOOL_NAME",
    "SHAREGPT_IMAGE_DIR",
    "DatasetFormatError",
    "task_code",
    "specvi_code",
    "infer_task",
    "parse_tool_response",
    "to_trl_example",
    "from_trl_example",
    "to_sharegpt_row",
    "from_sharegpt_row",
    "write_sharegpt_file",
    "load_sharegpt_file",
    "cold_start_warnings",
    "to_verl_row",
    "from_verl_row",
    "read_verl_parquet",
    "write_verl_parquet",
]
