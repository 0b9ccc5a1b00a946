"""A planted audit round with two scripted auditors: the catch-rate table staff read.

Run with -s to print it: each auditor catches each kind with its own probability (seeded), and
points at the planted turn when it locates the error, or at the other turn when it does not.
"""

from __future__ import annotations

import random

import pytest

from annotation.curation import planted
from annotation.curation import services as curation_services
from annotation.curation.models import PlantedError
from tests.factories import UserFactory, make_revised_curation

pytestmark = pytest.mark.django_db

# P(caught) per kind, and P(located | caught), for each scripted auditor.
SKILLS = {
    "careful": ({"flipped_answer": 0.95, "wrong_window": 0.8, "misread_line": 0.6,
                 "contradicting_step": 0.7}, 0.9),
    "hasty": ({"flipped_answer": 0.7, "wrong_window": 0.3, "misread_line": 0.2,
               "contradicting_step": 0.3}, 0.5),
}  # fmt: skip
COPIES = 24


def test_it_prints_a_planted_round_with_scripted_auditors(staff) -> None:
    reviser = UserFactory(username="reviser", roles=["expert"])
    approvers = [UserFactory(username=f"approver{n}", roles=["expert"]) for n in (1, 2)]
    auditors = [UserFactory(username=name, roles=["expert"]) for name in SKILLS]
    for n in range(COPIES):
        make_revised_curation(reviser=reviser, auditors=approvers, object_id=f"F-{n}", seed=n)
    planted.plant_round_create(
        actor=staff,
        kinds=list(SKILLS["careful"][0]),
        count=COPIES,
        seed=35,
        auditors=auditors,
    )
    rng = random.Random(35)
    for error in PlantedError.objects.select_related("curation").order_by("id"):
        for auditor in auditors:
            catch, locate = SKILLS[auditor.username]
            caught = rng.random() < catch[error.kind]
            # a wrong guess comments on the other turn (the copies have one tool step and the answer)
            key = str(error.target) if rng.random() < locate else str(1 - min(error.target, 1))
            error.curation.refresh_from_db()
            curation_services.audit_submit(
                curation=error.curation,
                user=auditor,
                version_number=error.curation.head_number,
                verdict="request_changes" if caught else "approve",
                comment="see the step" if caught else "",
                step_comments={key: "this is wrong"} if caught else None,
            )
    rates = planted.catch_rates()
    print(f"\nplanted round: {COPIES} copies, 2 scripted auditors, seed 35")
    print(f"{'group':42} {'n':>3} {'caught':>6} {'rate':>5} {'Wilson 95 %':>14} {'located':>7}")
    rows = [rates.overall, *rates.by_auditor, *rates.by_kind, *rates.by_auditor_and_kind]
    for rate in rows:
        low, high = rate.interval
        print(
            f"{rate.label:42} {rate.n:3d} {rate.caught:6d} {rate.rate or 0:5.2f} "
            f"[{low:.2f}, {high:.2f}]   {rate.located:5d}"
        )
    assert rates.overall.n == 2 * COPIES and rates.pending == 0
    by_auditor = {rate.key: rate for rate in rates.by_auditor}
    assert by_auditor["careful"].caught > by_auditor["hasty"].caught
    assert by_auditor["careful"].located > by_auditor["hasty"].located
    assert all(rate.located <= rate.caught for rate in rows)
