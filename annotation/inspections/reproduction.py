"""Reproducing a stored candidate: run its episodes again in-process and compare with what was
stored, field by field (verdict, confidence, rollouts, steps, images, live steps, catalog row).

The invariant every execution path must hold: what a worker stored for a candidate is what the
in-process ``agent.rollout.inspect`` of that candidate's own spectrum gives. The comparison is
the one the run page's "Reproduce", ``manage.py reproduce``, a run's background re-check, the
benchmarks and the tests all use. It writes nothing (``services.inspection_run_recheck_record``
stores a re-check's outcome).
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from annotation.inspections.models import (
    Candidate,
    CandidateState,
    CatalogEntry,
    InspectionRun,
    LiveStep,
    Rollout,
)
from annotation.inspections.run_policies import build_run_policy

# What differs between two executions of the same episode by design: the trajectory's random id
# and the seconds each turn took.
VOLATILE_TRAJECTORY_KEYS = frozenset({"id"})
VOLATILE_STEP_KEYS = frozenset({"generate_s", "tool_s"})
# Recorded for provenance, reported as a note when it differs (a later deploy reproducing an
# earlier run), never counted as a difference by itself: its effects are.
PROVENANCE_POLICY_KEYS = frozenset({"code_version"})

SHOWN_CHARS = 160  # of a differing value, in a report
MAX_DIFFERENCES = 50  # per candidate: the first ones say enough


@dataclass(frozen=True)
class Difference:
    where: str  # e.g. "rollout 0 step 2 assistant_text", "candidate confidence"
    stored: str
    reproduced: str

    def as_dict(self) -> dict[str, str]:
        return {"where": self.where, "stored": self.stored, "reproduced": self.reproduced}


@dataclass
class Reproduction:
    """The outcome of reproducing one candidate."""

    candidate_id: int
    checked: bool  # False: nothing to compare (``reason`` says why)
    reason: str = ""
    differences: list[Difference] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def matches(self) -> bool:
        return self.checked and not self.differences

    def as_dict(self) -> dict[str, Any]:
        return {
            "candidate": self.candidate_id,
            "checked": self.checked,
            "matches": self.matches,
            "reason": self.reason,
            "differences": [d.as_dict() for d in self.differences],
            "notes": list(self.notes),
            "seconds": round(self.seconds, 3),
        }


def reference_policy(run: InspectionRun) -> Any:
    """A fresh policy for the run (never the worker's cached one): the reference shares nothing
    with the execution it checks."""

    return build_run_policy(run.policy_spec, run.sampling)


def candidate_reproduce(candidate_id: int, *, policy: Any = None) -> Reproduction:
    """Re-run the candidate's episodes in-process and compare them with what was stored."""
    from agent.rollout import inspect
    from annotation.curation.services import PngsByHash
    from annotation.inspections.verdicts import candidate_verdict, rollout_meta
    from annotation.spectra.selectors import spectrum_value, task_value

    started = time.perf_counter()
    candidate = Candidate.objects.select_related("run__task", "spectrum").get(pk=candidate_id)
    run = candidate.run
    outcome = Reproduction(candidate_id=candidate.pk, checked=False)
    if candidate.state != CandidateState.DONE:
        outcome.reason = f"the candidate is {candidate.state}, not done: nothing stored to compare"
        return outcome
    stored_rollouts = list(Rollout.objects.filter(candidate=candidate).order_by("index"))
    if [r.index for r in stored_rollouts] != list(range(run.rollouts)):
        outcome.checked = True
        outcome.differences.append(
            _difference(
                "rollouts",
                [r.index for r in stored_rollouts],
                list(range(run.rollouts)),
            )
        )
        return outcome
    policy = policy if policy is not None else reference_policy(run)
    spectrum, task = spectrum_value(candidate.spectrum), task_value(run.task)
    live = _live_steps(candidate)
    differences: list[Difference] = []
    reproduced_rows: list[Rollout] = []
    for stored in stored_rollouts:
        trajectory = inspect(
            spectrum,
            task,
            policy,
            max_tool_calls=run.max_tool_calls,
            meta=rollout_meta(candidate=candidate, index=stored.index),
        )
        pngs = PngsByHash()
        fresh = trajectory.to_dict(png=pngs)
        where = f"rollout {stored.index}"
        images = ImageMatch(pngs.pngs)
        differences += _compare(_canonical(stored.data), _canonical(fresh), where, images)
        outcome.notes += _provenance_notes(stored.data, fresh, where)
        row = Rollout(
            index=stored.index,
            prediction=(trajectory.answer.prediction or "") if trajectory.answer else "",
            confidence=_trajectory_confidence(trajectory),
            n_tool_calls=trajectory.n_tool_calls,
            format_ok=bool(trajectory.format_ok),
            stop_reason=trajectory.stop_reason or "",
        )
        reproduced_rows.append(row)
        for column in ("prediction", "confidence", "n_tool_calls", "format_ok", "stop_reason"):
            differences += _compare(
                getattr(stored, column), getattr(row, column), f"{where} {column}"
            )
        fresh_steps = [_canonical_step(step) for step in fresh["steps"]]
        live_steps = live.get(stored.index, [])
        if live_steps:  # live steps are kept for the live view; when kept, they must agree
            differences += _compare(live_steps, fresh_steps, f"{where} live steps", images)
        fresh_only = {k: v for k, v in pngs.pngs.items() if k not in images.stored_as}
        differences += _check_images(fresh_only, where)
        outcome.notes += images.notes
    verdict, confidence, share = candidate_verdict(reproduced_rows)
    differences += _compare(candidate.verdict, verdict, "candidate verdict")
    differences += _compare(candidate.confidence, confidence, "candidate confidence")
    differences += _compare(candidate.vote_share, share, "candidate vote share")
    differences += _check_catalog(candidate)
    outcome.checked = True
    outcome.differences = differences[:MAX_DIFFERENCES]
    outcome.seconds = time.perf_counter() - started
    return outcome


def _trajectory_confidence(trajectory: Any) -> float | None:
    from agent.rollout import trajectory_confidence

    return trajectory_confidence(trajectory)


def _canonical(data: dict[str, Any]) -> dict[str, Any]:
    """A stored trajectory without what varies from one execution to the next."""
    out = {key: value for key, value in data.items() if key not in VOLATILE_TRAJECTORY_KEYS}
    out["steps"] = [_canonical_step(step) for step in data.get("steps") or []]
    policy = data.get("policy")
    if isinstance(policy, dict):
        out["policy"] = {k: v for k, v in policy.items() if k not in PROVENANCE_POLICY_KEYS}
    return out


def _canonical_step(step: Any) -> Any:
    if not isinstance(step, dict):
        return step
    return {key: value for key, value in step.items() if key not in VOLATILE_STEP_KEYS}


def _provenance_notes(stored: dict[str, Any], fresh: dict[str, Any], where: str) -> list[str]:
    notes = []
    for key in sorted(PROVENANCE_POLICY_KEYS):
        before = (stored.get("policy") or {}).get(key)
        after = (fresh.get("policy") or {}).get(key)
        if before != after:
            notes.append(f"{where}: recorded with {key} {before}, reproduced with {after}")
    return notes


def _live_steps(candidate: Candidate) -> dict[int, list[Any]]:
    steps: dict[int, list[Any]] = {}
    for row in LiveStep.objects.filter(candidate=candidate).order_by("rollout_index", "step_index"):
        steps.setdefault(row.rollout_index, []).append(_canonical_step(row.data))
    return steps


def _check_images(pngs: dict[str, bytes], where: str) -> list[Difference]:
    """Every image the reproduction shows is stored under its own hash, with its own bytes
    (``pngs`` leaves out those whose picture the rollout stores under another: ImageMatch)."""
    from annotation.core.models import ImageBlob

    stored = dict(ImageBlob.objects.filter(sha256__in=list(pngs)).values_list("sha256", "png"))
    differences = []
    for digest in sorted(pngs):
        blob = stored.get(digest)
        if blob is None:
            differences.append(Difference(f"{where} image {digest[:12]}", "missing", "present"))
        elif hashlib.sha256(bytes(blob)).hexdigest() != digest:
            differences.append(
                Difference(f"{where} image {digest[:12]}", "other bytes under this hash", digest)
            )
    return differences


def _check_catalog(candidate: Candidate) -> list[Difference]:
    entry = CatalogEntry.objects.filter(candidate=candidate).first()
    if entry is None:
        return [Difference("catalog entry", "missing", "present")]
    spectrum, run = candidate.spectrum, candidate.run
    expected = {
        "run_id": run.pk,
        "object_id": spectrum.object_id,
        "survey": spectrum.survey,
        "ra": spectrum.ra,
        "dec": spectrum.dec,
        "snr": spectrum.snr,
        "task_code": run.task.code,
        "verdict": candidate.verdict,
        "confidence": candidate.confidence,
        "synthetic": spectrum.synthetic,
    }
    differences = []
    for name, value in expected.items():
        differences += _compare(getattr(entry, name), value, f"catalog {name}")
    return differences


class ImageMatch:
    """Whether a stored image shows what the reproduction drew: the same PNG hash, or, when the
    hashes differ, the same picture decoded from both (``agent.render.picture_digest``: another
    deflate may encode the same pixels in other bytes, and that is no difference in what the
    inspector saw; it is noted)."""

    def __init__(self, fresh: dict[str, bytes]) -> None:
        self.fresh = fresh
        self.notes: list[str] = []
        self.stored_as: set[str] = set()  # fresh hashes whose picture is stored under another
        # A rollout's image and its live step's are one pair: read and decoded once.
        self._decided: dict[tuple[str, str], bool] = {}

    def same(self, stored_sha: Any, fresh_sha: Any, where: str) -> bool:
        if stored_sha == fresh_sha:
            return True
        pair = (str(stored_sha), str(fresh_sha))
        if pair not in self._decided:
            self._decided[pair] = self._same_picture(*pair)
        if self._decided[pair]:
            self.stored_as.add(pair[1])
            self.notes.append(f"{where}: the same pixels in other PNG bytes")
        return self._decided[pair]

    def _same_picture(self, stored_sha: str, fresh_sha: str) -> bool:
        from agent.render import picture_digest
        from annotation.core.models import ImageBlob

        fresh_png = self.fresh.get(fresh_sha)
        stored = ImageBlob.objects.filter(sha256=stored_sha).values_list("png", flat=True)
        stored_png = next(iter(stored), None)
        if fresh_png is None or stored_png is None:
            return False
        stored_png = bytes(stored_png)
        if hashlib.sha256(stored_png).hexdigest() != stored_sha:
            return False  # other bytes under this hash: never the same image
        picture = picture_digest(fresh_png)
        return picture is not None and picture_digest(stored_png) == picture


def _compare(
    stored: Any, reproduced: Any, where: str, images: ImageMatch | None = None
) -> list[Difference]:
    return list(_walk(stored, reproduced, where, images))


def _walk(
    stored: Any, reproduced: Any, where: str, images: ImageMatch | None
) -> Iterator[Difference]:
    if isinstance(stored, dict) and isinstance(reproduced, dict):
        for key in sorted(set(stored) | set(reproduced), key=str):
            if key not in stored or key not in reproduced:
                yield _difference(
                    f"{where} {key}", stored.get(key, "(absent)"), reproduced.get(key, "(absent)")
                )
            elif key == "png_sha256" and images is not None:
                if not images.same(stored[key], reproduced[key], f"{where} {key}"):
                    yield _difference(f"{where} {key}", stored[key], reproduced[key])
            else:
                yield from _walk(stored[key], reproduced[key], f"{where} {key}", images)
        return
    if isinstance(stored, list | tuple) and isinstance(reproduced, list | tuple):
        if len(stored) != len(reproduced):
            yield _difference(f"{where} length", len(stored), len(reproduced))
        for position, (left, right) in enumerate(zip(stored, reproduced, strict=False)):
            yield from _walk(left, right, f"{where} {position}", images)
        return
    if not _equal(stored, reproduced):
        yield _difference(where, stored, reproduced)


def _equal(left: Any, right: Any) -> bool:
    both_numbers = all(
        isinstance(value, int | float) and not isinstance(value, bool) for value in (left, right)
    )
    if both_numbers:
        # A float goes through JSON and the database and comes back the same number; the
        # tolerance only absorbs a last-digit decimal round trip, never a different answer.
        return math.isclose(float(left), float(right), rel_tol=1e-12, abs_tol=0.0)
    return bool(left == right)


def _difference(where: str, stored: Any, reproduced: Any) -> Difference:
    return Difference(where, _shown(stored), _shown(reproduced))


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 1] + "…"


def run_reproduce(
    run: InspectionRun, *, candidate_ids: list[int] | None = None, sample: int | None = None
) -> list[Reproduction]:
    """Reproduce the given candidates of ``run``, or ``sample`` of its finished ones spread
    evenly over the run (all of them when ``sample`` is None)."""
    finished = Candidate.objects.filter(run=run, state=CandidateState.DONE).order_by("pk")
    ids = list(finished.values_list("pk", flat=True))
    if candidate_ids is not None:
        wanted = set(candidate_ids)
        ids = [pk for pk in ids if pk in wanted]
    if sample is not None and 0 < sample < len(ids):
        step = len(ids) / sample
        ids = [ids[int(position * step)] for position in range(sample)]
    policy = reference_policy(run)
    return [candidate_reproduce(pk, policy=policy) for pk in ids]
