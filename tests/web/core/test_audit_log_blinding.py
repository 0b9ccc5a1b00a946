"""The audit log follows the read rules of the objects it describes.

sam is staff and rates an open campaign beside erin (expert and rater): the runs, candidates
and curation that fed it are hidden from sam, and so must be their entries in the log, with
erin's scores and pair judgements (a rater sees others' scores only once the campaign closes).
stella (staff, rating nothing) still reads every entry.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from annotation.core import services as core_services
from annotation.core.models import AuditLog, Job
from annotation.core.roles import Role
from annotation.inspections import services as inspections_services
from annotation.inspections.models import Rollout
from annotation.rating import services as rating_services
from annotation.rating.models import PairJudgement, RatingAssignment
from tests.factories import UserFactory
from tests.web.core.test_blinding import BlindWorld, give_roles, rolled_back

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def world(django_db_setup, django_db_blocker) -> Iterator[BlindWorld]:
    with rolled_back(django_db_blocker) as built:
        sam = UserFactory(username="sam", is_staff=True)
        give_roles(sam, Role.RATER)
        built.users["sam"] = sam
        erin = built.users["erin"]
        rollouts = list(Rollout.objects.filter(candidate__run__name__in=["run-alpha", "run-beta"]))
        sources = rating_services.rating_sources_from_rollouts(rollouts)
        sources += rating_services.rating_sources_from_curations([built.curation])
        campaign = rating_services.campaign_create(
            name="staff rates",
            raters=[sam, erin],
            raters_per_item=2,
            sources=sources,
            created_by=built.users["stella"],
            seed=7,
        )
        left, right = campaign.items.filter(source__startswith="rollout:")[:2]
        rating_services.campaign_add_pairs(
            campaign=campaign, pairs=[(left, right)], raters_per_pair=2, actor=None
        )
        for rater, score in ((erin, 1), (sam, 4)):
            assignment = RatingAssignment.objects.filter(item__campaign=campaign, rater=rater)[0]
            rating_services.rating_submit(
                assignment=assignment, rater=rater, score=score, comment=f"{rater.username} says"
            )
            judgement = PairJudgement.objects.get(pair__campaign=campaign, rater=rater)
            rating_services.pair_judgement_submit(judgement=judgement, rater=rater, outcome="tie")
        core_services.job_create(
            kind="standardize", params={"curation_ids": [built.curation.pk]}, created_by=None
        )
        vic = UserFactory(username="vetter")
        give_roles(vic, Role.EXPERT)
        for run in ("run-delta", "run-gamma"):  # delta shows an item's spectrum, gamma does not
            inspections_services.expert_decision_record(
                candidate=built.candidate(run), expert=vic, decision="YES"
            )
        yield built


def entries(world: BlindWorld, who: str) -> list[dict]:
    client = APIClient()
    client.force_authenticate(world.users[who])
    rows, url = [], reverse("api_audit_log")
    while url:
        page = client.get(url).json()
        rows += page["results"]
        url = page["next"]
    return rows


def keys(rows: list[dict]) -> set[tuple[str, str]]:
    return {(row["object_type"], row["object_pk"]) for row in rows}


def hidden_objects(world: BlindWorld) -> set[tuple[str, str]]:
    return {
        ("InspectionRun", str(world.runs["run-alpha"].pk)),
        ("InspectionRun", str(world.runs["run-beta"].pk)),
        ("Curation", str(world.curation.pk)),
    }


def test_it_hides_the_entries_of_objects_hidden_from_a_staff_rater(world):
    seen = keys(entries(world, "sam"))
    assert not seen & hidden_objects(world)
    assert ("InspectionRun", str(world.runs["run-gamma"].pk)) in seen  # another spectrum


def test_it_hides_the_entries_of_candidates_and_jobs_that_name_an_items_model(world):
    rows = entries(world, "sam")
    candidates = {pk for kind, pk in keys(rows) if kind == "Candidate"}
    assert candidates == {str(world.candidate("run-gamma").pk)}
    # The only jobs sam may read of are the background re-checks of runs he may see.
    hidden_runs = {world.runs["run-alpha"].pk, world.runs["run-beta"].pk}
    shown = Job.objects.filter(pk__in=[int(pk) for kind, pk in keys(rows) if kind == "Job"])
    assert all(job.kind == "inspection_recheck" for job in shown)
    assert not {job.params["run_id"] for job in shown} & hidden_runs
    assert Job.objects.filter(kind="inspection_recheck", params__run_id__in=hidden_runs).exists()


def test_it_hides_other_raters_scores_and_judgements_while_the_campaign_is_open(world):
    rows = entries(world, "sam")
    scored = [row for row in rows if row["action"] in ("rating_scored", "pair_judged")]
    assert {row["actor"] for row in scored} == {"sam"}
    assert "erin says" not in str(rows)


def test_it_shows_staff_who_rate_nothing_every_entry(world):
    rows = entries(world, "stella")
    assert len(rows) == AuditLog.objects.count()
    assert hidden_objects(world) <= keys(rows)
    assert "erin says" in str(rows)


def test_it_counts_and_pages_only_what_the_staff_rater_may_read(world):
    client = APIClient()
    client.force_authenticate(world.users["sam"])
    count = client.get(reverse("api_audit_log")).json()["count"]
    assert count == len(entries(world, "sam")) < AuditLog.objects.count()


def test_it_hides_the_same_entries_on_the_audit_log_page(world):
    client = Client()
    client.force_login(world.users["sam"])
    run = world.runs["run-alpha"]
    page = client.get(reverse("audit_log"), {"object_type": "InspectionRun", "object_pk": run.pk})
    assert page.status_code == 200
    assert b"inspection_run_created" not in page.content
    staff = Client()
    staff.force_login(world.users["stella"])
    shown = staff.get(reverse("audit_log"), {"object_type": "InspectionRun", "object_pk": run.pk})
    assert b"inspection_run_created" in shown.content


def test_it_probes_entries_of_every_hidden_kind(world):
    kinds = {kind for kind, _ in keys(entries(world, "stella"))}
    assert {
        "InspectionRun",
        "Candidate",
        "Curation",
        "Job",
        "RatingAssignment",
        "PairJudgement",
    } <= kinds
