"""One of everything, built through the services, with the same text wherever a model, an
expert or an uploader may write: reasoning, tool labels, answers, comments, names, file names.

The access tests build it with plain text (so every path parameter has an object behind it);
the escaping tests build it with script-injection payloads.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest
from django.db import transaction
from django.test import TestCase, override_settings

from agent.editing import answer_text, standardize, step_text
from annotation.core import services as core_services
from annotation.core.models import Job
from annotation.curation import datasets as curation_datasets
from annotation.curation import selectors as curation_selectors
from annotation.curation import services as curation_services
from annotation.curation.models import Curation, DatasetExport
from annotation.inspections import jobs
from annotation.inspections import services as inspections_services
from annotation.inspections.models import Candidate, CatalogEntry, InspectionRun
from annotation.rating import services as rating_services
from annotation.rating.models import (
    CampaignItem,
    Judge,
    PairJudgement,
    RatingAssignment,
    RatingCampaign,
)
from annotation.spectra import selectors as spectra_selectors
from annotation.spectra.models import Spectrum, Task
from tests.factories import ScriptedPolicy, UserFactory, make_endpoint, make_spectrum


@dataclass
class World:
    text: str
    task: Task
    spectrum: Spectrum
    curation: Curation  # accepted: every audit and vote is in, so everyone may read them
    open_curation: Curation  # in revision after changes were requested (the editor's view)
    discarded: Curation
    export: DatasetExport
    job: Job
    run: InspectionRun
    candidate: Candidate
    entry: CatalogEntry
    campaign: RatingCampaign  # closed, with scores, a pair judged, a judge's score
    open_campaign: RatingCampaign  # open, nothing scored
    item: CampaignItem
    assignment: RatingAssignment
    judgement: PairJudgement
    judge: Judge
    image_sha: str
    users: dict[str, Any]


class NamedPolicy(ScriptedPolicy):
    """Scripted turns under a given name, unsure enough (0.6) to go to the experts."""

    def __init__(self, name: str, turns: list[str]) -> None:
        super().__init__(turns)
        self.name = name
        self.confidence = 0.6

    def info(self) -> dict[str, str]:
        return {"name": self.name, "model": f"{self.name}/v1"}


def model_turns(text: str) -> list[str]:
    """A trajectory whose reasoning, tool label, answer and justification all carry `text`."""
    return [step_text(text, (6500.0, 6630.0), text), answer_text(text, "YES", text)]


def model_trajectory(spectrum: Spectrum, task: Task, text: str):
    from agent.rollout import inspect

    value, agent_task = (
        spectra_selectors.spectrum_value(spectrum),
        spectra_selectors.task_value(task),
    )
    return inspect(value, agent_task, NamedPolicy(text, model_turns(text)))


def make_task(text: str) -> Task:
    """A task an expert could add in the admin, its names and texts set to `text`."""
    cv = Task.objects.get(code="CV")
    windows = [dict(window, name=f"{window['name']} {text}") for window in cv.windows]
    task = Task(
        code="XSS",
        name=text,
        question=f"{text} Is this a cataclysmic variable?",
        guideline=text,
        windows=windows,
        contaminants=cv.contaminants,
    )
    task.full_clean()
    task.save()
    return task


def _audit_round(curation: Curation, users: dict[str, Any], text: str, verdict: str) -> None:
    for name in ("auditor", "second_auditor"):
        curation_services.audit_submit(
            curation=curation,
            user=users[name],
            version_number=curation.head_number,
            verdict=verdict if name == "auditor" else "approve",
            comment=text,
            step_comments={"0": text},
        )
    curation.refresh_from_db()


def _revise(curation: Curation, users: dict[str, Any], text: str) -> None:
    head = curation_selectors.version_trajectory(curation_selectors.head_version(curation))
    curation_services.curation_save_revision(
        curation=curation,
        user=users["reviser"],
        base_number=curation.head_number,
        trajectory=head,
        comment=text,
    )


def make_curations(task: Task, spectrum: Spectrum, users: dict[str, Any], text: str):
    """(accepted, in revision after changes were requested, discarded)."""
    made = []
    for _ in range(3):
        made.append(
            curation_services.curation_create(
                spectrum=spectrum,
                task=task,
                trajectory=model_trajectory(spectrum, task, text),
                ground_truth="YES",
                teacher={"name": text},
            )
        )
    accepted, reopened, discarded = made
    curation_services.curation_screen(
        curation=discarded, user=users["outsider"], keep=False, reason=text
    )
    for curation in (accepted, reopened):
        curation_services.curation_screen(curation=curation, user=users["outsider"], keep=True)
        curation_services.curation_claim_revision(curation=curation, user=users["reviser"])
        _revise(curation, users, text)
        curation_services.curation_submit_for_audit(
            curation=curation, user=users["reviser"], base_number=curation.head_number
        )
        for name in ("auditor", "second_auditor"):
            curation_services.curation_claim_audit(curation=curation, user=users[name])
        _audit_round(curation, users, text, "request_changes")
    _revise(accepted, users, text)
    curation_services.curation_submit_for_audit(
        curation=accepted, user=users["reviser"], base_number=accepted.head_number
    )
    _audit_round(accepted, users, text, "approve")
    head = curation_selectors.version_trajectory(curation_selectors.head_version(accepted))
    curation_services.curation_standardize(
        curation=accepted, trajectory=standardize(head), standardizer={"name": text}
    )
    for name in ("reviser", "auditor", "second_auditor"):
        curation_services.vote_cast(
            curation=accepted, user=users[name], value="accept", comment=text
        )
    for curation in made:
        curation.refresh_from_db()
    return accepted, reopened, discarded


def make_run(
    task: Task, spectrum: Spectrum, *, name: str, policy: str, text: str, monkeypatch, capture
) -> InspectionRun:
    monkeypatch.setattr(
        jobs, "policy_for", lambda spec, sampling=None: NamedPolicy(policy, model_turns(text))
    )
    with capture(execute=True):
        run = inspections_services.inspection_run_create(
            task=task,
            spectrum_ids=[spectrum.pk],
            policy_spec={"kind": "rule-based"},
            created_by=None,
            name=name,
            confidence_threshold=0.9,  # so the candidate goes to the experts' vetting queue
        )
    return run


def make_campaigns(runs: list[InspectionRun], users: dict[str, Any], text: str):
    from annotation.inspections.models import Rollout

    rollouts = list(
        Rollout.objects.filter(candidate__run__in=runs).select_related(
            "candidate__run__task", "candidate__spectrum"
        )
    )
    raters = [users["auditor"], users["second_auditor"]]
    campaigns = []
    for _ in range(2):
        campaign = rating_services.campaign_create(
            name=text,
            description=text,
            raters=raters,
            raters_per_item=2,
            sources=rating_services.rating_sources_from_rollouts(rollouts),
            created_by=users["staff"],
            seed=1,
        )
        first, second = campaign.items.order_by("id")
        rating_services.campaign_add_pairs(
            campaign=campaign, pairs=[(first, second)], raters_per_pair=2, actor=None
        )
        campaigns.append(campaign)
    closed, still_open = campaigns
    for assignment in RatingAssignment.objects.filter(item__campaign=closed):
        rating_services.rating_submit(
            assignment=assignment, rater=assignment.rater, score=3, comment=text
        )
    for judgement in PairJudgement.objects.filter(pair__campaign=closed):
        rating_services.pair_judgement_submit(
            judgement=judgement, rater=judgement.rater, outcome="tie"
        )
    judge = rating_services.judge_create(
        name=text, endpoint=make_endpoint(name="judge-world", model=text), actor=users["staff"]
    )
    for item in closed.items.all():
        rating_services.judge_score_record(judge=judge, item=item, score=4, reason=text, raw=text)
    rating_services.campaign_close(campaign=closed, actor=users["staff"])
    return closed, still_open, judge


def build_world(text: str, *, monkeypatch, capture) -> World:
    # The auditors also rate the campaigns; the outsider (no part in any object) may also start
    # ML work, so the pages of every domain have a reader among them.
    roles = {
        "reviser": ["expert"],
        "auditor": ["expert", "rater"],
        "second_auditor": ["expert", "rater"],
        "outsider": ["expert", "ml_engineer"],
        "staff": ["staff"],
    }
    users = {name: UserFactory(username=name, roles=held) for name, held in roles.items()}
    task = make_task(text)
    spectrum = make_spectrum(object_id=text, task=task, label="YES")  # stored from "{text}.fits"
    accepted, reopened, discarded = make_curations(task, spectrum, users, text)
    export = curation_datasets.dataset_export_create(actor=users["staff"])
    job = core_services.job_create(kind="draft", params={"note": text}, created_by=users["staff"])
    runs = [
        make_run(
            task,
            spectrum,
            name=text,
            policy=text,
            text=text,
            monkeypatch=monkeypatch,
            capture=capture,
        ),
        make_run(
            task,
            spectrum,
            name="second run",
            policy="other-policy",
            text=text,
            monkeypatch=monkeypatch,
            capture=capture,
        ),
    ]
    candidate = runs[0].candidates.get()
    inspections_services.expert_decision_record(
        candidate=candidate, expert=users["auditor"], decision="unsure", comment=text
    )
    closed, still_open, judge = make_campaigns(runs, users, text)
    version = curation_selectors.head_version(accepted)
    image_sha = version.data["steps"][0]["tool_result"]["image"]["png_sha256"]
    return World(
        text=text,
        task=task,
        spectrum=spectrum,
        curation=accepted,
        open_curation=reopened,
        discarded=discarded,
        export=export,
        job=job,
        run=runs[0],
        candidate=candidate,
        entry=CatalogEntry.objects.get(candidate=candidate),
        campaign=closed,
        open_campaign=still_open,
        item=closed.items.order_by("id").first(),
        assignment=RatingAssignment.objects.filter(item__campaign=closed).first(),
        judgement=PairJudgement.objects.filter(pair__campaign=closed).first(),
        judge=judge,
        image_sha=image_sha,
        users=users,
    )


@contextmanager
def world_rolled_back(
    text: str, *, django_db_blocker: Any, tmp_path_factory: Any
) -> Iterator[World]:
    """A world built once (it takes seconds) for a module's tests, rolled back afterwards."""
    media = override_settings(MEDIA_ROOT=tmp_path_factory.mktemp("media"))
    with (
        django_db_blocker.unblock(),
        transaction.atomic(),
        media,
        pytest.MonkeyPatch.context() as patch,
    ):
        yield build_world(text, monkeypatch=patch, capture=TestCase.captureOnCommitCallbacks)
        transaction.set_rollback(True)
