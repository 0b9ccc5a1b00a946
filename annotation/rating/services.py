"""Rating writes: campaigns, assignments, scores, pairwise judgements, judges."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from annotation.core import endpoints
from annotation.core import errors as core_errors
from annotation.core import services as core_services
from annotation.core.errors import NotAllowed, WorkflowError, WrongState
from annotation.core.models import Job, JobState, ModelEndpoint
from annotation.core.services import audit_log_record
from annotation.curation.models import (
    Curation,
)
from annotation.curation.services import _is_staff
from annotation.inspections.models import (
    CandidateState,
    InspectionRun,
    Rollout,
)
from annotation.rating.models import (
    CampaignItem,
    Judge,
    JudgeScore,
    PairItem,
    PairJudgement,
    PairOutcome,
    RatingAssignment,
    RatingCampaign,
)
from annotation.rating.permissions import is_manager
from annotation.spectra.models import Spectrum, Task

# --- rating campaigns ----------------------------------------------------------------------------


@dataclass(frozen=True)
class RatingSource:
    """One trajectory to put in a campaign, with what raters must not see kept apart."""

    source: str
    data: dict[str, Any]  # stored trajectory dict (blob hashes)
    policy_name: str
    task: Task
    spectrum: Spectrum | None
    dataset: str = ""
    # People who shaped this trajectory (a curation's reviser and auditors): they may not rate it.
    involved: dict[int, str] = field(default_factory=dict)  # user id -> their part in it


def _fresh_seed() -> int:
    """A random 62-bit seed. SeedSequence() draws its entropy from the OS: an int (the stubs
    also allow the sequence or None a caller may pass in)."""
    return cast(int, np.random.SeedSequence().entropy) % (2**62)


def balanced_assignment(
    n_items: int, n_raters: int, per_item: int, rng: np.random.Generator
) -> list[list[int]]:
    """For each item, `per_item` distinct raters; loads differ by at most one between raters."""
    if not 1 <= per_item <= n_raters:
        raise WorkflowError(
            f"raters per item must be between 1 and the number of raters ({n_raters}); "
            f"got {per_item}"
        )
    load = [0] * n_raters
    chosen: list[list[int]] = []
    for _ in range(n_items):
        tie_break = rng.permutation(n_raters)
        order = sorted(range(n_raters), key=lambda r: (load[r], tie_break[r]))
        picked = sorted(order[:per_item])
        for rater in picked:
            load[rater] += 1
        chosen.append(picked)
    return chosen


def _blind_id(rng: np.random.Generator) -> str:
    return "".join(f"{v:02x}" for v in rng.integers(0, 256, size=5))


@transaction.atomic
def campaign_create(
    *,
    name: str,
    raters: list[User],
    raters_per_item: int,
    sources: list[RatingSource],
    created_by: User | None,
    description: str = "",
    seed: int | None = None,
) -> RatingCampaign:
    """A rating campaign: items in random order, assigned to raters at random and balanced."""
    if not sources:
        raise WorkflowError("a campaign needs at least one trajectory to rate")
    unique_raters = list({rater.pk: rater for rater in raters}.values())
    _refuse_conflicts_of_interest(unique_raters, sources)
    seed = int(seed if seed is not None else _fresh_seed())
    rng = np.random.default_rng(seed)
    campaign = RatingCampaign.objects.create(
        name=name[:120],
        description=description,
        raters_per_item=raters_per_item,
        seed=seed,
        created_by=created_by if created_by is not None and created_by.is_authenticated else None,
    )
    campaign.raters.set(unique_raters)
    order = rng.permutation(len(sources))
    items = []
    used: set[str] = set()
    for index in order:
        source = sources[int(index)]
        blind = _blind_id(rng)
        while blind in used:
            blind = _blind_id(rng)
        used.add(blind)
        items.append(
            CampaignItem.objects.create(
                campaign=campaign,
                blind_id=blind,
                data=source.data,
                policy_name=source.policy_name[:120],
                source=source.source[:80],
                dataset=source.dataset[:80],
                task=source.task,
                spectrum=source.spectrum,
            )
        )
    plan = balanced_assignment(len(items), len(unique_raters), raters_per_item, rng)
    per_rater: dict[int, list[CampaignItem]] = {r: [] for r in range(len(unique_raters))}
    for item, rater_indexes in zip(items, plan, strict=True):
        for rater_index in rater_indexes:
            per_rater[rater_index].append(item)
    assignments = []
    for rater_index, rater_items in per_rater.items():
        for position, item_index in enumerate(rng.permutation(len(rater_items))):
            assignments.append(
                RatingAssignment(
                    item=rater_items[int(item_index)],
                    rater=unique_raters[rater_index],
                    position=position,
                )
            )
    RatingAssignment.objects.bulk_create(assignments)
    audit_log_record(
        actor=created_by,
        action="campaign_created",
        obj=campaign,
        comment=f"{len(items)} items x {raters_per_item} raters, seed {seed}",
    )
    return campaign


def rating_sources_from_rollouts(rollouts: Iterable[Rollout]) -> list[RatingSource]:
    sources = []
    for rollout in rollouts:
        run = rollout.candidate.run
        spectrum = rollout.candidate.spectrum
        policy = str(run.policy_info.get("name") or run.policy_spec.get("kind"))
        sources.append(
            RatingSource(
                source=f"rollout:{rollout.pk}",
                data=rollout.data,
                # A run is one "model" for rating: the policy plus its run configuration.
                policy_name=f"{policy} · {run.name}" if run.name else policy,
                task=run.task,
                spectrum=spectrum,
                dataset=spectrum.survey,
            )
        )
    return sources


def _refuse_conflicts_of_interest(raters: list[User], sources: list[RatingSource]) -> None:
    """Nobody rates a trajectory they revised or audited (every rater sees every item they are
    assigned, and assignment is random, so the refusal is for the campaign as a whole)."""
    conflicts = []
    for rater in raters:
        for source in sources:
            part = source.involved.get(rater.pk)
            if part:
                conflicts.append(f"{rater.get_username()} is the {part} of {source.source}")
    if conflicts:
        raise WorkflowError(
            "conflict of interest: raters may not rate a trajectory they revised or audited ("
            + "; ".join(conflicts[:5])
            + (f"; and {len(conflicts) - 5} more" if len(conflicts) > 5 else "")
            + "): leave them out of the raters or the curation out of the campaign"
        )


def _curation_involved(curation: Curation) -> dict[int, str]:
    involved: dict[int, str] = {}
    for auditor_id in curation.audits.values_list("auditor_id", flat=True):
        involved[auditor_id] = "auditor"
    for auditor in curation.auditors:
        involved[auditor.pk] = "auditor"
    authors = curation.versions.exclude(author=None).values_list("author_id", flat=True)
    for author_id in authors:
        involved[author_id] = "reviser"
    if curation.reviser_id is not None:
        involved[curation.reviser_id] = "reviser"
    return involved


def rating_sources_from_curations(curations: Iterable[Curation]) -> list[RatingSource]:
    sources = []
    for curation in curations:
        version = curation.versions.get(number=curation.head_number)
        sources.append(
            RatingSource(
                source=f"curation:{curation.pk}@v{version.number}",
                data=version.data,
                policy_name=str(curation.teacher.get("name") or "teacher"),
                task=curation.task,
                spectrum=curation.spectrum,
                dataset=curation.spectrum.survey,
                involved=_curation_involved(curation),
            )
        )
    return sources


@transaction.atomic
def campaign_add_pairs(
    *,
    campaign: RatingCampaign,
    pairs: list[tuple[CampaignItem, CampaignItem]],
    raters_per_pair: int,
    actor: User | None,
) -> list[PairItem]:
    """Pairwise comparisons of two items for the same spectrum; which side is which is random
    per pair (and recorded, so outcomes map back to policies). Audit-logged; refused once the
    campaign is closed."""
    campaign = _open_campaign(campaign.pk, "this campaign is closed; pairs can no longer be added")
    rng = np.random.default_rng(campaign.seed + 1 + campaign.pairs.count())
    raters = list(campaign.raters.all())
    created = []
    for first, second in pairs:
        if first.spectrum_id is None or first.spectrum_id != second.spectrum_id:
            raise WorkflowError("a pair compares two trajectories of the same spectrum")
        if first.policy_name == second.policy_name:
            raise WorkflowError("a pair compares two different policies")
        left, right = (first, second) if rng.random() < 0.5 else (second, first)
        created.append(
            PairItem.objects.create(
                campaign=campaign, left=left, right=right, dataset=first.dataset
            )
        )
    plan = balanced_assignment(len(created), len(raters), raters_per_pair, rng)
    positions: dict[int, int] = {}
    judgements = []
    for pair, rater_indexes in zip(created, plan, strict=True):
        for rater_index in rater_indexes:
            rater = raters[rater_index]
            positions[rater.pk] = positions.get(rater.pk, -1) + 1
            judgements.append(PairJudgement(pair=pair, rater=rater, position=positions[rater.pk]))
    PairJudgement.objects.bulk_create(judgements)
    audit_log_record(
        actor=actor,
        action="campaign_pairs_added",
        obj=campaign,
        comment=f"{len(created)} pairs x {raters_per_pair} raters",
    )
    return created


def _open_campaign(campaign_id: int, refusal: str) -> RatingCampaign:
    """Lock the campaign row and refuse when it is closed.

    Score, judgement and close all take this lock, so a write and a close serialize: a write
    either commits before the close or sees it (never a cached ``closed`` read before it).
    """
    campaign = RatingCampaign.objects.select_for_update().get(pk=campaign_id)
    if campaign.closed:
        raise WrongState(refusal)
    return campaign


@transaction.atomic
def rating_submit(
    *, assignment: RatingAssignment, rater: User, score: int, comment: str = ""
) -> RatingAssignment:
    if assignment.rater_id != rater.pk:
        raise NotAllowed("this item is assigned to another rater")
    campaign = _open_campaign(
        assignment.item.campaign_id, "the campaign is closed; ratings can no longer change"
    )
    if isinstance(score, bool) or not isinstance(score, int) or not 0 <= score <= 5:
        raise WorkflowError(f"a score is a whole number from 0 to 5; got {score!r}")
    previous = (
        RatingAssignment.objects.filter(pk=assignment.pk).values_list("score", flat=True).get()
    )
    assignment.score = score
    assignment.comment = comment
    assignment.rated_at = timezone.now()
    assignment.save(update_fields=["score", "comment", "rated_at"])
    audit_log_record(
        actor=rater,
        action="rating_scored",
        obj=assignment,
        from_state="" if previous is None else str(previous),
        to_state=str(score),
        comment=comment,
        data={"campaign": campaign.pk, "item": assignment.item.blind_id},
    )
    return assignment


@transaction.atomic
def pair_judgement_submit(*, judgement: PairJudgement, rater: User, outcome: str) -> PairJudgement:
    if judgement.rater_id != rater.pk:
        raise NotAllowed("this pair is assigned to another rater")
    campaign = _open_campaign(
        judgement.pair.campaign_id, "the campaign is closed; judgements can no longer change"
    )
    if outcome not in PairOutcome.values:
        raise WorkflowError(f"outcome must be left, tie or right; got {outcome!r}")
    previous = PairJudgement.objects.filter(pk=judgement.pk).values_list("outcome", flat=True).get()
    judgement.outcome = outcome
    judgement.judged_at = timezone.now()
    judgement.save(update_fields=["outcome", "judged_at"])
    audit_log_record(
        actor=rater,
        action="pair_judged",
        obj=judgement,
        from_state=previous,
        to_state=outcome,
        data={"campaign": campaign.pk, "pair": judgement.pair_id},
    )
    return judgement


@transaction.atomic
def campaign_close(*, campaign: RatingCampaign, actor: User) -> RatingCampaign:
    if not (_is_staff(actor) or campaign.created_by_id == actor.pk):
        raise NotAllowed("only staff or the campaign's creator can close it")
    _open_campaign(campaign.pk, "the campaign is already closed")
    updated = RatingCampaign.objects.filter(pk=campaign.pk, closed=False).update(
        closed=True, closed_at=timezone.now()
    )
    if updated != 1:  # SQLite has no row locks: the conditional update is the guard there
        raise WrongState("the campaign is already closed")
    campaign.refresh_from_db()
    audit_log_record(actor=actor, action="campaign_closed", obj=campaign)
    return campaign


@transaction.atomic
def judge_create(
    *,
    name: str,
    endpoint: ModelEndpoint,
    actor: User,
    prompt: str = "",
    include_images: bool = True,
) -> Judge:
    """A judge calling a registered, enabled endpoint; its URL and model are kept as they were."""
    from agent.judges import JUDGE_RUBRIC_PROMPT

    if not _is_staff(actor):
        raise NotAllowed("only staff can add LLM judges")
    try:
        endpoints.check_usable(endpoint)
    except endpoints.EndpointError as error:
        raise WorkflowError(str(error)) from None
    judge = Judge.objects.create(
        name=name,
        endpoint=endpoint,
        base_url=endpoint.base_url,
        model=endpoint.model,
        prompt=prompt or JUDGE_RUBRIC_PROMPT,
        include_images=include_images,
    )
    audit_log_record(
        actor=actor,
        action="judge_created",
        obj=judge,
        comment=f"{endpoint.model} on endpoint {endpoint.name}",
        data={"endpoint": endpoint.name},
    )
    return judge


def judge_score_record(
    *, judge: Judge, item: CampaignItem, score: int | None, reason: str, raw: str, error: str = ""
) -> JudgeScore:
    record, _ = JudgeScore.objects.update_or_create(
        judge=judge,
        item=item,
        defaults={"score": score, "reason": reason, "raw": raw, "error": error[:5000]},
    )
    return record


# --- shared with the API: composing and running campaigns ---------------------------------------


def _finished_first_rollouts(run: InspectionRun) -> list[Rollout]:
    return list(
        Rollout.objects.filter(
            candidate__run=run, candidate__state=CandidateState.DONE, index=0
        ).select_related("candidate__run__task", "candidate__spectrum")
    )


def _sample(rows: list[Any], n: int, rng: np.random.Generator) -> list[Any]:
    if len(rows) <= n:
        return rows
    picked = sorted(int(i) for i in rng.choice(len(rows), size=n, replace=False))
    return [rows[i] for i in picked]


def _paired_rollouts(
    run_a: InspectionRun, run_b: InspectionRun, n: int, rng: np.random.Generator
) -> list[tuple[Rollout, Rollout]]:
    """Both runs' rollouts on the same n spectra, drawn among the spectra the runs share."""
    by_spectrum_a = {r.candidate.spectrum_id: r for r in _finished_first_rollouts(run_a)}
    by_spectrum_b = {r.candidate.spectrum_id: r for r in _finished_first_rollouts(run_b)}
    shared = sorted(set(by_spectrum_a) & set(by_spectrum_b))
    if not shared:
        raise core_errors.WorkflowError(
            f"runs {run_a} and {run_b} share no spectrum with a finished rollout to compare"
        )
    return [(by_spectrum_a[s], by_spectrum_b[s]) for s in _sample(shared, n, rng)]


def campaign_create_from_choices(
    *,
    name: str,
    description: str,
    raters: list[Any],
    raters_per_item: int,
    runs: list[InspectionRun],
    rollouts_per_run: int,
    curations: list[Curation],
    pair_runs: tuple[InspectionRun, InspectionRun] | None,
    raters_per_pair: int,
    seed: int | None,
    created_by: Any,
) -> RatingCampaign:
    """Sample the trajectories (with the campaign's seed), create the campaign, add the pairs.

    The two runs compared pairwise are sampled over the spectra they share, the same spectra
    for both, so every sampled spectrum makes one pair.
    """
    seed = int(seed if seed is not None else _fresh_seed())
    rng = np.random.default_rng(seed)
    paired = _paired_rollouts(*pair_runs, rollouts_per_run, rng) if pair_runs else []
    skip = {run.pk for run in pair_runs or ()}
    rollouts = [r for pair in paired for r in pair]
    for run in sorted(runs, key=lambda run: run.pk):
        if run.pk not in skip:
            rollouts.extend(_sample(_finished_first_rollouts(run), rollouts_per_run, rng))
    sources = rating_sources_from_rollouts(rollouts)
    sources += rating_sources_from_curations(curations)
    with transaction.atomic():
        campaign = campaign_create(
            name=name,
            raters=raters,
            raters_per_item=raters_per_item,
            sources=sources,
            created_by=created_by,
            description=description,
            seed=seed,
        )
        if paired:
            items = {item.source: item for item in campaign.items.all()}
            campaign_add_pairs(
                campaign=campaign,
                pairs=[(items[f"rollout:{a.pk}"], items[f"rollout:{b.pk}"]) for a, b in paired],
                raters_per_pair=raters_per_pair,
                actor=campaign.created_by,
            )
    return campaign


def judge_run_start(*, campaign: RatingCampaign, judge: Judge, user: Any) -> Job:
    if not is_manager(campaign, user):
        raise core_errors.NotAllowed("only staff or the campaign's creator can start a judge")
    running = Job.objects.filter(
        kind="judge",
        params__campaign_id=campaign.pk,
        params__judge_id=judge.pk,
        state__in=[JobState.QUEUED, JobState.RUNNING],
    )
    if running.exists():
        raise core_errors.WrongState(f"judge {judge.name} is already scoring this campaign")
    return core_services.job_create(
        kind="judge",
        params={"judge_id": judge.pk, "campaign_id": campaign.pk},
        created_by=user,
        total=campaign.items.count(),
    )
