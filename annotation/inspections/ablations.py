"""Evidence ablation of finished candidates (``agent.ablation``): does a verdict rest on the
windows it zoomed into and the lines it cites?

Staff send a seeded random sample of a run's finished candidates (``evidence_ablation_start``);
a background job (``jobs.run_evidence_ablation``, a Celery ``run_job`` sent on commit) ablates
each one in-process and records it (``evidence_ablation_record``): the windows, the answer and
confidence before and after, the control of random windows, and the outcome, which the catalog
row keeps too so the list can filter on it. The latest ablation of a candidate holds.

What is ablated is the candidate's first rollout: the windows it zoomed into and cited. The
before, after and control answers all come from re-runs of the run's own policy (built as the
reproduction check builds it), so the three differ by the masked windows alone.
"""

from __future__ import annotations

import random
import zlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.db import transaction

from annotation.core.errors import WrongState
from annotation.core.services import audit_log_record, job_create
from annotation.inspections.models import (
    Candidate,
    CandidateState,
    CatalogEntry,
    EvidenceAblation,
    InspectionRun,
    Rollout,
)

if TYPE_CHECKING:
    from django.contrib.auth.models import User

    from agent.ablation import AblationResult
    from annotation.core.models import Job

ABLATION_JOB = "evidence_ablation"
MAX_SAMPLE = 500  # candidates per request: a model run re-runs three episodes each


def candidate_seed(seed: int, candidate_id: int) -> int:
    """The ablation seed of one candidate in a sample drawn with ``seed``: the same on every
    worker and every retry, different between candidates."""
    return zlib.crc32(f"{seed}:{candidate_id}".encode())


def sample_candidates(run: InspectionRun, *, size: int, seed: int) -> list[int]:
    """``size`` of the run's finished candidates drawn at random with ``seed`` (all of them
    when there are fewer), in id order."""
    finished = Candidate.objects.filter(run=run, state=CandidateState.DONE).order_by("pk")
    ids = list(finished.values_list("pk", flat=True))
    if size >= len(ids):
        return ids
    return sorted(random.Random(seed).sample(ids, size))


@transaction.atomic
def evidence_ablation_start(*, run: InspectionRun, actor: User | None, size: int, seed: int) -> Job:
    """Send a seeded random sample of the run's finished candidates to be ablated."""
    if not 1 <= size <= MAX_SAMPLE:
        raise WrongState(f"the sample size must be between 1 and {MAX_SAMPLE}; got {size}")
    ids = sample_candidates(run, size=size, seed=seed)
    if not ids:
        raise WrongState(f"run {run.pk} has no finished candidate to ablate")
    job = job_create(
        kind=ABLATION_JOB,
        params={"run_id": run.pk, "candidate_ids": ids, "seed": seed},
        created_by=actor,
        total=len(ids),
    )
    audit_log_record(
        actor=actor,
        action="evidence_ablation_started",
        obj=run,
        comment=f"{len(ids)} candidates, seed {seed}",
        data={"job": job.pk, "seed": seed, "size": size},
    )
    return job


@dataclass
class CandidateAblation:
    candidate_id: int
    seed: int
    result: AblationResult | None  # None: nothing to ablate (``reason``)
    reason: str = ""


def candidate_ablate(candidate_id: int, *, seed: int, policy: Any = None) -> CandidateAblation:
    """Ablate one finished candidate in-process (writes nothing)."""
    from agent.ablation import ablate_verdict, restarting
    from agent.trajectory import Trajectory
    from annotation.curation.selectors import trajectory_from_stored
    from annotation.inspections.reproduction import reference_policy
    from annotation.inspections.verdicts import rollout_meta
    from annotation.spectra.selectors import spectrum_value, task_value

    candidate = Candidate.objects.select_related("run__task", "spectrum").get(pk=candidate_id)
    own_seed = candidate_seed(seed, candidate.pk)
    if candidate.state != CandidateState.DONE:
        return CandidateAblation(
            candidate.pk, own_seed, None, f"the candidate is {candidate.state}"
        )
    first = Rollout.objects.filter(candidate=candidate).order_by("index").first()
    if first is None:
        return CandidateAblation(candidate.pk, own_seed, None, "the candidate has no rollout")
    run = candidate.run
    trajectory: Trajectory = trajectory_from_stored(first.data)
    policy = policy if policy is not None else reference_policy(run)
    result = ablate_verdict(
        spectrum_value(candidate.spectrum),
        task_value(run.task),
        trajectory,
        restarting(policy),
        seed=own_seed,
        max_tool_calls=run.max_tool_calls,
        meta=rollout_meta(candidate=candidate, index=first.index),
    )
    return CandidateAblation(candidate.pk, own_seed, result)


@transaction.atomic
def evidence_ablation_record(
    *, ablation: CandidateAblation, job_id: int | None = None
) -> EvidenceAblation | None:
    """Store a candidate's ablation (replacing an earlier one) and its outcome on the catalog
    row; nothing when there was nothing to ablate."""
    result = ablation.result
    if result is None:
        return None
    detail = result.as_dict()

    def answer(outcome: Any) -> tuple[str, float | None]:
        if outcome is None:
            return "", None
        return outcome.prediction or "", outcome.confidence

    before, after, control = (
        answer(o) for o in (result.before, result.after, result.control_outcome)
    )
    row, _ = EvidenceAblation.objects.update_or_create(
        candidate_id=ablation.candidate_id,
        defaults={
            "seed": ablation.seed,
            "windows": detail["windows"],
            "masked": detail["masked"],
            "control": detail["control"],
            "decisive": [" + ".join(names) for names in detail["decisive_names"]],
            "answer_before": before[0],
            "confidence_before": before[1],
            "answer_after": after[0],
            "confidence_after": after[1],
            "answer_control": control[0],
            "confidence_control": control[1],
            "flipped": result.flipped,
            "control_flipped": result.control_flipped,
            "confident": result.confident,
            "insensitive": result.insensitive,
            "outcome": result.outcome,
            "detail": detail,
            "job_id": job_id,
        },
    )
    CatalogEntry.objects.filter(candidate_id=ablation.candidate_id).update(
        evidence_outcome=result.outcome
    )
    return row
