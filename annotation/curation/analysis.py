"""The curation analysis (staff): where the trajectories are, how often the two auditors of a
round agree, and the auditors' catch rate on planted errors (annotation.curation.planted).

Planted copies count only in the catch rates: the state counts and the audit agreement are
over real trajectories.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db.models import Count

from agent.agreement import cohen_kappa
from annotation.curation import planted
from annotation.curation.models import Audit, AuditVerdict, Curation, CurationState


@dataclass(frozen=True)
class AuditAgreement:
    rounds: int  # audit rounds with two verdicts on the same version
    agreed: int
    kappa: float | None  # Cohen's kappa, first verdict of the round against the second

    @property
    def rate(self) -> float | None:
        return self.agreed / self.rounds if self.rounds else None

    def as_dict(self) -> dict[str, Any]:
        return {
            "rounds": self.rounds,
            "agreed": self.agreed,
            "agreement": self.rate,
            "kappa": self.kappa,
        }


def state_counts() -> list[dict[str, Any]]:
    """Real trajectories per state, in pipeline order (planted copies left out)."""
    counts = dict(
        Curation.objects.filter(planted=False)
        .order_by()
        .values_list("state")
        .annotate(n=Count("id"))
    )
    return [
        {"state": value, "label": str(label), "count": counts.get(value, 0)}
        for value, label in CurationState.choices
    ]


def audit_agreement() -> AuditAgreement:
    """How often the two auditors of a round gave the same verdict on the same version."""
    verdicts: dict[tuple[int, int, int], dict[int, str]] = {}
    rows = (
        Audit.objects.filter(curation__planted=False)
        .order_by("id")
        .values_list("curation_id", "round", "version_number", "auditor_id", "verdict")
    )
    for curation_id, round_number, version, auditor_id, verdict in rows:
        verdicts.setdefault((curation_id, round_number, version), {}).setdefault(
            auditor_id, verdict
        )
    pairs = [list(by_auditor.values())[:2] for by_auditor in verdicts.values()]
    pairs = [pair for pair in pairs if len(pair) == 2]
    approves = [[int(verdict == AuditVerdict.APPROVE) for verdict in pair] for pair in pairs]
    first = [pair[0] for pair in approves]
    second = [pair[1] for pair in approves]
    kappa = cohen_kappa(first, second, categories=[0, 1]) if pairs else None
    return AuditAgreement(len(pairs), sum(a == b for a, b in pairs), kappa)


def curation_analysis() -> dict[str, Any]:
    return {
        "states": state_counts(),
        "agreement": audit_agreement(),
        "catch_rates": planted.catch_rates(),
    }
