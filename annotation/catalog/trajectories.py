"""Catalog reads for one entry's stored trajectories: what its page shows of each step, and the
expert scores its rollouts received in closed rating campaigns."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from annotation.rating.models import RatingAssignment

_SHA256 = re.compile(r"^[0-9a-f]{64}$")


def is_sha256(value: str) -> bool:
    return bool(_SHA256.match(value))


@dataclass(frozen=True)
class StepView:
    index: int
    think: str
    text: str  # the raw turn, shown when it has no parsed reasoning
    tool_name: str
    tool_arguments: dict[str, Any] | None
    result_ok: bool | None
    result_text: str
    image_sha256: str
    image_range: list[float] | None
    image_label: str

    @property
    def arguments_json(self) -> str:
        return json.dumps(self.tool_arguments, ensure_ascii=False, sort_keys=True)


@dataclass(frozen=True)
class TrajectoryView:
    initial_image_sha256: str
    steps: list[StepView]
    prediction: str
    justification: str
    stop_reason: str
    format_ok: bool | None
    inspected: list[list[float]] = field(default_factory=list)


def _image_fields(image: Any) -> tuple[str, list[float] | None, str]:
    if not isinstance(image, dict):
        return "", None, ""
    sha = str(image.get("png_sha256") or "")
    return (sha if is_sha256(sha) else ""), image.get("wavelength_range"), image.get("label") or ""


def trajectory_view(data: dict[str, Any]) -> TrajectoryView:
    """What a page shows of a stored trajectory, read straight from the stored dict (the
    PNGs stay in ImageBlob and are served by hash, never inlined)."""
    steps: list[StepView] = []
    for step in data.get("steps") or []:
        call = step.get("tool_call") or {}
        result = step.get("tool_result") or {}
        sha, shown_range, label = _image_fields(result.get("image"))
        steps.append(
            StepView(
                index=int(step.get("index", len(steps))),
                think=step.get("think") or "",
                text=step.get("assistant_text") or "",
                tool_name=call.get("name") or "",
                tool_arguments=call.get("arguments") if call else None,
                result_ok=result.get("ok") if result else None,
                result_text=result.get("text") or "",
                image_sha256=sha,
                image_range=shown_range,
                image_label=label,
            )
        )
    answer = data.get("answer") or {}
    initial_sha, _, _ = _image_fields(data.get("initial_image"))
    return TrajectoryView(
        initial_image_sha256=initial_sha,
        steps=steps,
        prediction=answer.get("prediction") or "",
        justification=answer.get("justification") or "",
        stop_reason=data.get("stop_reason") or "",
        format_ok=data.get("format_ok"),
        inspected=[list(step.image_range) for step in steps if step.image_range],
    )


def rollout_ratings(rollout_ids: Iterable[int]) -> dict[int, list[RatingAssignment]]:
    """Expert scores of these rollouts from rating campaigns, per rollout id.

    Only closed campaigns count: while a campaign runs its raters stay blind to each other's
    scores and to which policy wrote the trajectory, and this page would tell them.
    """
    sources = {f"rollout:{pk}": pk for pk in rollout_ids}
    ratings: dict[int, list[RatingAssignment]] = {pk: [] for pk in sources.values()}
    scored = (
        RatingAssignment.objects.filter(
            item__source__in=list(sources), item__campaign__closed=True, score__isnull=False
        )
        .select_related("item__campaign", "rater")
        .order_by("item__campaign_id", "rated_at", "id")
    )
    for assignment in scored:
        ratings[sources[assignment.item.source]].append(assignment)
    return ratings
