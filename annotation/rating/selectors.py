"""Rating reads: rater queues and progress, what a rater sees (blinded), campaign analysis."""

from __future__ import annotations

import json
from typing import Any

from django.db.models import Count, Q, QuerySet
from django.urls import reverse

from annotation.core.models import Job
from annotation.inspections import selectors as inspections_selectors
from annotation.rating.models import (
    CampaignItem,
    Judge,
    JudgeScore,
    PairJudgement,
    RatingAssignment,
    RatingCampaign,
)
from annotation.spectra import selectors as spectra_selectors

# --- rating campaigns ------------------------------------------------------------------------------

BLINDED_KEYS = ("policy", "meta")


def blinded_trajectory(data: dict[str, Any]) -> dict[str, Any]:
    """What a rater may see of a trajectory: no policy, model or provenance."""
    return {key: value for key, value in data.items() if key not in BLINDED_KEYS}


def rater_queue(*, campaign: RatingCampaign, rater: Any) -> QuerySet[RatingAssignment]:
    return RatingAssignment.objects.filter(
        item__campaign=campaign, rater=rater, score__isnull=True
    ).select_related("item__task", "item__spectrum")


def rater_progress(*, campaign: RatingCampaign, rater: Any) -> dict[str, int]:
    # Two queries, not four: the rating page asks for this on every score.
    scores = RatingAssignment.objects.filter(item__campaign=campaign, rater=rater).aggregate(
        rated=Count("id", filter=Q(score__isnull=False)), total=Count("id")
    )
    pairs = PairJudgement.objects.filter(pair__campaign=campaign, rater=rater).aggregate(
        judged=Count("id", filter=~Q(outcome="")), pairs=Count("id")
    )
    return {
        "rated": scores["rated"],
        "total": scores["total"],
        "judged": pairs["judged"],
        "pairs": pairs["pairs"],
    }


def can_see_analysis(*, campaign: RatingCampaign, user: Any) -> bool:
    """Raters see others' scores (and the models) only once the campaign is closed."""
    if campaign.closed:
        return True
    is_rater = campaign.raters.filter(pk=user.pk).exists()
    return not is_rater and (bool(user.is_staff) or campaign.created_by_id == user.pk)


def _pairwise_analysis(campaign: RatingCampaign) -> dict[str, Any]:
    from agent.agreement import Comparison, bradley_terry_bootstrap, win_tie_loss

    judgements = PairJudgement.objects.filter(pair__campaign=campaign).exclude(outcome="")
    rows = judgements.select_related("pair__left", "pair__right")
    policies = sorted(
        {name for j in rows for name in (j.pair.left.policy_name, j.pair.right.policy_name)}
    )
    if len(policies) < 2:
        return {"policies": policies, "shares": {}, "strengths": {}}
    reference = policies[0]
    outcomes: dict[str, list[str]] = {}
    comparisons: list[Comparison] = []
    for judgement in rows:
        left, right = judgement.pair.left.policy_name, judgement.pair.right.policy_name
        if judgement.outcome == "tie":
            comparisons.append((left, right, "tie"))
        else:
            winner = left if judgement.outcome == "left" else right
            comparisons.append((winner, right if winner == left else left))
        if reference in (left, right):
            if judgement.outcome == "tie":
                relative = "tie"
            else:
                winner = left if judgement.outcome == "left" else right
                relative = "A" if winner == reference else "B"
            outcomes.setdefault(judgement.pair.dataset or "all", []).append(relative)
    shares = {dataset: s.as_dict() for dataset, s in win_tie_loss(outcomes).items()}
    strengths = {}
    if len(policies) > 2 or comparisons:
        intervals = bradley_terry_bootstrap(comparisons, n_boot=500, seed=campaign.seed, prior=0.5)
        strengths = {
            name: {"estimate": i.estimate, "low": i.lo, "high": i.hi}
            for name, i in intervals.items()
        }
    return {"policies": policies, "reference": reference, "shares": shares, "strengths": strengths}


def analysis_needs(*, n_raters: int, alpha: float | None, n_series: int) -> dict[str, str]:
    """What an agreement figure still needs, in words ("" when it can be shown): Krippendorff's
    alpha needs two raters scoring the same trajectory, the Spearman heatmap the human mean and
    at least one judge."""
    alpha_needs = ""
    if n_raters < 2:
        alpha_needs = (
            f"needs scores from at least two raters on the same trajectories; "
            f"{n_raters} rater{'' if n_raters == 1 else 's'} ha{'s' if n_raters == 1 else 've'} "
            "scored so far"
        )
    elif alpha is None:
        alpha_needs = (
            "not defined yet: it needs a trajectory scored by two raters, and scores that differ "
            "somewhere"
        )
    spearman_needs = (
        ""
        if n_series >= 2
        else "needs a judge's scores beside the human mean: run an LLM judge on this campaign"
    )
    return {"alpha": alpha_needs, "spearman": spearman_needs}


def campaign_analysis(*, campaign: RatingCampaign) -> dict[str, Any]:
    """Figure 4 of the paper for one campaign: distributions, agreement, judges, pairwise."""
    from agent import agreement

    items = list(campaign.items.all())
    by_item_id = {item.pk: item for item in items}
    ratings = list(
        RatingAssignment.objects.filter(
            item__campaign=campaign, score__isnull=False
        ).select_related("rater")
    )
    by_rater: dict[str, dict[str, int | None]] = {}
    by_item: dict[str, dict[str, int | None]] = {}
    for rating in ratings:
        blind = by_item_id[rating.item_id].blind_id
        by_rater.setdefault(rating.rater.get_username(), {})[blind] = rating.score
        by_item.setdefault(blind, {})[rating.rater.get_username()] = rating.score
    human_scores = [r.score for r in ratings]
    human_mean = agreement.mean_scores(by_item) if by_item else {}
    judges: dict[str, dict[str, int | None]] = {}
    unscored: dict[str, int] = {}
    for score in JudgeScore.objects.filter(item__campaign=campaign).select_related("judge"):
        blind = by_item_id[score.item_id].blind_id
        judges.setdefault(score.judge.name, {})[blind] = score.score
        if score.score is None:
            unscored[score.judge.name] = unscored.get(score.judge.name, 0) + 1
    blinds = [item.blind_id for item in items]
    series: dict[str, list[float | None]] = {"human mean": [human_mean.get(b) for b in blinds]}
    for name, scores in judges.items():
        series[name] = [scores.get(b) for b in blinds]
    names, matrix = agreement.spearman_matrix(series)
    matrix_rows = agreement.rating_matrix(by_rater) if by_rater else None
    alpha = agreement.krippendorff_alpha(matrix_rows.rows, level="ordinal") if matrix_rows else None
    distributions = {"humans": human_scores} | {
        name: [s for s in scores.values() if s is not None] for name, scores in judges.items()
    }
    policy_of = {item.blind_id: item.policy_name for item in items}
    per_policy: dict[str, list[float]] = {}
    for blind, mean in human_mean.items():
        per_policy.setdefault(policy_of[blind], []).append(mean)
    return {
        "n_items": len(items),
        "n_ratings": len(ratings),
        "n_raters": len(by_rater),
        "needs": analysis_needs(n_raters=len(by_rater), alpha=alpha, n_series=len(names)),
        "histograms": {
            name: agreement.score_histogram(values)
            for name, values in distributions.items()
            if values
        },
        "cdfs": {
            name: agreement.score_cdf(values) for name, values in distributions.items() if values
        },
        "spearman": {"names": names, "matrix": matrix},
        "krippendorff_alpha": alpha,
        "kappas": [
            {"a": k.rater_a, "b": k.rater_b, "n": k.n_common, "kappa": k.kappa}
            for k in agreement.pairwise_kappas(by_rater)
        ]
        if len(by_rater) > 1
        else [],
        "disagreement": [
            {"item": d.item, "spread": d.spread, "std": d.std}
            for d in agreement.disagreement(by_item)[:20]
            if d.spread > 0
        ],
        "judges_unscored": unscored,
        "policy_means": {
            name: sum(values) / len(values) for name, values in sorted(per_policy.items())
        },
        "pairwise": _pairwise_analysis(campaign),
    }


# --- shared with the API: what raters see -------------------------------------------------------


def image_url(image: dict[str, Any] | None, campaign_id: int) -> str | None:
    """The image's URL, its access checked among the items of this campaign."""
    if not image or not image.get("png_sha256"):
        return None
    return f"{reverse('image_blob', args=[image['png_sha256']])}?campaign={campaign_id}"


def _rater_step(step: dict[str, Any], campaign_id: int) -> dict[str, Any]:
    call = step.get("tool_call")
    result = step.get("tool_result")
    image = (result or {}).get("image")
    return {
        "number": int(step.get("index", 0)) + 1,
        "think": step.get("think") or "",
        "assistant_text": step.get("assistant_text") or "",
        "tool_call": None
        if call is None
        else {
            "name": call.get("name", ""),
            "arguments": call.get("arguments"),
            "arguments_json": json.dumps(call.get("arguments"), ensure_ascii=False),
            "wavelength_range": call.get("wavelength_range"),
            "label": call.get("label"),
        },
        "tool_result": None
        if result is None
        else {
            "ok": bool(result.get("ok")),
            "text": result.get("text") or "",
            "image": None
            if not image
            else {
                "url": image_url(image, campaign_id),
                "wavelength_range": image.get("wavelength_range"),
                "label": image.get("label"),
            },
        },
    }


def rater_item_view(item: CampaignItem) -> dict[str, Any]:
    """One trajectory as a rater sees it: what the model wrote and was shown, nothing else.

    Left out on purpose: the policy and meta (model, checkpoint, sampling), the trajectory id
    and the spectrum's object id (they lead back to the inspection run that made it), per-step
    timings and token counts (they differ between models) and error messages (they may name
    the endpoint or the model).
    """
    data = blinded_trajectory(item.data)
    steps = [_rater_step(step, item.campaign_id) for step in data.get("steps") or []]
    return {
        "blind_id": item.blind_id,
        "task": item.task.code,
        "question": item.task.question,
        "prompt": data.get("user_prompt") or "",
        "initial_image": image_url(data.get("initial_image"), item.campaign_id),
        "steps": steps,
        "answer": data.get("answer"),
        "stop_reason": data.get("stop_reason") or "",
        "inspected": inspections_selectors.inspected_ranges(data.get("steps") or []),
    }


def item_plot_data(item: CampaignItem, *, blinded: bool = True) -> dict[str, Any] | None:
    if item.spectrum is None:
        return None
    plot = spectra_selectors.spectrum_plot_data(row=item.spectrum, task=item.task)
    plot["inspected"] = inspections_selectors.inspected_ranges(item.data.get("steps") or [])
    if blinded:
        plot.pop("object_id", None)
        # The spectrum's zoom URL names the spectrum, which leads back to the run: a zoomed
        # rating plot asks for its window by the item's blind id instead (raters only).
        if plot.pop("zoom_url", None):
            plot["zoom_url"] = reverse(
                "api_rating_item_plot", args=[item.campaign_id, item.blind_id]
            )
    return plot


def rater_item(*, campaign: RatingCampaign, rater: Any, blind_id: str) -> CampaignItem | None:
    """The campaign's item ``blind_id`` if ``rater`` is shown it: assigned to them to rate, or
    one side of a pair they judge; None otherwise (to them it does not exist)."""
    items = CampaignItem.objects.select_related("spectrum").filter(
        campaign=campaign, blind_id=blind_id
    )
    item = items.first()
    if item is None:
        return None
    if RatingAssignment.objects.filter(item=item, rater=rater).exists():
        return item
    judged = PairJudgement.objects.filter(pair__campaign=campaign, rater=rater)
    if judged.filter(Q(pair__left=item) | Q(pair__right=item)).exists():
        return item
    return None


def campaign_summary(campaign: RatingCampaign) -> dict[str, Any]:
    return {
        "id": campaign.pk,
        "name": campaign.name,
        "description": campaign.description,
        "closed": campaign.closed,
    }


def rater_pair_queue(*, campaign: RatingCampaign, rater: Any) -> QuerySet[PairJudgement]:
    return PairJudgement.objects.filter(pair__campaign=campaign, rater=rater, outcome="")


def own_assignment(campaign: RatingCampaign, user: Any, pk: object) -> RatingAssignment | None:
    try:
        return RatingAssignment.objects.select_related(
            "item__task", "item__spectrum", "item__campaign"
        ).get(pk=int(str(pk)), item__campaign=campaign, rater=user)
    except (ValueError, RatingAssignment.DoesNotExist):
        return None


def own_judgement(campaign: RatingCampaign, user: Any, pk: object) -> PairJudgement | None:
    try:
        return PairJudgement.objects.select_related(
            "pair__campaign", "pair__left__task", "pair__right__task"
        ).get(pk=int(str(pk)), pair__campaign=campaign, rater=user)
    except (ValueError, PairJudgement.DoesNotExist):
        return None


def judge_rows(campaign: RatingCampaign) -> list[dict[str, Any]]:
    counts = {
        row["judge"]: row
        for row in JudgeScore.objects.filter(item__campaign=campaign)
        .values("judge")
        .annotate(
            scored=Count("id", filter=Q(score__isnull=False)),
            unscored=Count("id", filter=Q(score__isnull=True, error="")),
            errors=Count("id", filter=~Q(error="")),
        )
    }
    latest: dict[int, Job] = {}
    for job in Job.objects.filter(kind="judge", params__campaign_id=campaign.pk).order_by("id"):
        latest[job.params.get("judge_id")] = job
    return [
        {"judge": judge, "counts": counts.get(judge.pk), "job": latest.get(judge.pk)}
        for judge in Judge.objects.order_by("name")
    ]


def previous_assignment(campaign: RatingCampaign, user: Any, position: int | None) -> int | None:
    rows = RatingAssignment.objects.filter(item__campaign=campaign, rater=user)
    if position is not None:
        rows = rows.filter(position__lt=position)
    return (
        rows.filter(score__isnull=False).order_by("-position").values_list("pk", flat=True).first()
    )


def campaigns_rated_by(*, user: Any) -> QuerySet[RatingCampaign]:
    return RatingCampaign.objects.filter(raters=user)


def campaigns_managed_by(*, user: Any) -> QuerySet[RatingCampaign]:
    """Staff manage every campaign; anyone else the ones they created."""
    managed = RatingCampaign.objects.annotate(n_items=Count("items"))
    return managed if user.is_staff else managed.filter(created_by=user)


def item_scores(*, item: CampaignItem) -> dict[str, Any]:
    """The experts' and judges' scores of one item (for the analysis, never for raters)."""
    return {
        "ratings": item.assignments.filter(score__isnull=False).select_related("rater"),
        "pending": item.assignments.filter(score__isnull=True).count(),
        "judge_scores": item.judge_scores.select_related("judge").order_by("judge__name"),
    }


def judges_with_counts() -> QuerySet[Judge]:
    return (
        Judge.objects.select_related("endpoint").annotate(n_scores=Count("scores")).order_by("name")
    )


def campaigns_visible_to(*, user: Any) -> QuerySet[RatingCampaign]:
    """Staff see every campaign; anyone else those they rate in or created."""
    rows = RatingCampaign.objects.all()
    if not user.is_staff:
        rows = rows.filter(raters=user) | rows.filter(created_by=user)
    return rows.distinct()
