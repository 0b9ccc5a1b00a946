"""What a candidate's rollouts mean, computed without writing: its verdict, and what each
rollout records to name its own input. Shared by the services that store results and the
reproduction check that recomputes them (so neither imports the other)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from annotation.inspections.models import Candidate, Rollout


def rollout_meta(*, candidate: Candidate, index: int) -> dict[str, Any]:
    """What a candidate's rollout records beside the trajectory, to name its own input: the
    run, candidate and spectrum, the spectrum's content hash and the run's sampling."""
    return {
        "run": candidate.run_id,
        "candidate": candidate.pk,
        "rollout": index,
        "spectrum_id": candidate.spectrum_id,
        "spectrum_content_hash": candidate.spectrum.content_hash,
        "sampling": candidate.run.sampling or {},
    }


def candidate_verdict(rollouts: list[Rollout]) -> tuple[str, float | None, float]:
    """(verdict, confidence, vote share) of a candidate from its rollouts.

    The verdict is the majority answer. The confidence is the policy's own probability of that
    answer averaged over rollouts when the policy reports one, else the vote share.
    """
    from agent.calibration import majority_verdict

    verdict, share = majority_verdict([r.prediction or None for r in rollouts])
    if verdict is None:
        return "", 0.5 if share else 0.0, share
    reported = [r for r in rollouts if r.confidence is not None and r.prediction]
    if reported and len(reported) == len(rollouts):
        probabilities = [
            r.confidence if r.prediction == verdict else 1.0 - r.confidence
            for r in reported
            if r.confidence is not None  # always (see reported); narrows the type
        ]
        return verdict, sum(probabilities) / len(probabilities), share
    return verdict, share, share
