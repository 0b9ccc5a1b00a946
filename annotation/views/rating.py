"""Expert rating (paper section 4.5, appendix G): campaigns, the Figure 7 rating page, pairwise
comparisons, LLM judges and the agreement analysis of Figure 4.

Blinding: what a rater is shown is built by `rater_item_view` as plain dicts (never model
instances), so neither a template nor the API can reach an item's policy, its source or the
other raters' scores while the campaign is open. The helpers under "shared with the API" are
also used by annotation/apis/rating.py; every write goes through annotation/services.py.
"""

from __future__ import annotations

import csv
import io
import json
from typing import Any

import numpy as np
from django.contrib import messages
from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import Count, Q, QuerySet
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django_htmx.middleware import HtmxDetails
from rest_framework.request import Request

from agent.agreement import RUBRIC
from annotation import charts, permissions, selectors, services
from annotation.forms_rating import CampaignForm, JudgeForm, PairForm, ScoreForm
from annotation.models import (
    CampaignItem,
    CandidateState,
    Curation,
    InspectionRun,
    Job,
    JobState,
    Judge,
    JudgeScore,
    PairJudgement,
    RatingAssignment,
    RatingCampaign,
    Rollout,
)
from annotation.permissions import require_role

FIGURES = (
    "histograms",
    "cdfs",
    "spearman",
    "kappas",
    "disagreement",
    "pairwise",
    "strengths",
    "policy_means",
    "judge_scores",
)
RUBRIC_ROWS = [{"score": score, "text": text} for score, text in RUBRIC.items()]
OUTCOME_KEYS = [
    {"outcome": "left", "key": "ArrowLeft", "symbol": "←", "label": "left better"},
    {"outcome": "tie", "key": "ArrowDown", "symbol": "↓", "label": "tie"},
    {"outcome": "right", "key": "ArrowRight", "symbol": "→", "label": "right better"},
]


class HtmxHttpRequest(HttpRequest):
    htmx: HtmxDetails


# --- access -------------------------------------------------------------------------------------


def is_manager(campaign: RatingCampaign, user: Any) -> bool:
    """Staff run every campaign: close it, follow raters, start judges. Its creator no longer
    does once they lose the staff role (creating one needs it)."""
    return permissions.RATING_MANAGE.allows(user)


def is_rater(campaign: RatingCampaign, user: Any) -> bool:
    return campaign.raters.filter(pk=user.pk).exists()


def get_campaign_for_user(request: HttpRequest | Request, campaign_id: int) -> RatingCampaign:
    """The campaign, for its raters, its creator and staff. To anyone else it does not exist
    (404): an outsider learns nothing of it, open or closed."""
    campaign = get_object_or_404(RatingCampaign, pk=campaign_id)
    if not (is_manager(campaign, request.user) or is_rater(campaign, request.user)):
        raise Http404("no such campaign")
    return campaign


def _forbidden(request: HttpRequest, reason: str) -> HttpResponse:
    return render(request, "rating/forbidden.html", {"reason": reason}, status=403)


def _status_for(error: services.WorkflowError) -> int:
    if isinstance(error, services.NotAllowed):
        return 403
    if isinstance(error, services.WrongState):
        return 409
    return 400


ANALYSIS_HIDDEN = (
    "The analysis shows every rater's scores and which model wrote each trajectory, so raters "
    "see it only once the campaign is closed."
)


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
    data = selectors.blinded_trajectory(item.data)
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
        "inspected": selectors.inspected_ranges(data.get("steps") or []),
    }


def item_plot_data(item: CampaignItem, *, blinded: bool = True) -> dict[str, Any] | None:
    if item.spectrum is None:
        return None
    plot = selectors.spectrum_plot_data(row=item.spectrum, task=item.task)
    plot["inspected"] = selectors.inspected_ranges(item.data.get("steps") or [])
    if blinded:
        plot.pop("object_id", None)
        plot.pop("zoom_url", None)  # it names the spectrum, which leads back to the run
    return plot


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
        raise services.WorkflowError(
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
    seed = int(seed if seed is not None else np.random.SeedSequence().entropy % (2**62))
    rng = np.random.default_rng(seed)
    paired = _paired_rollouts(*pair_runs, rollouts_per_run, rng) if pair_runs else []
    skip = {run.pk for run in pair_runs or ()}
    rollouts = [r for pair in paired for r in pair]
    for run in sorted(runs, key=lambda run: run.pk):
        if run.pk not in skip:
            rollouts.extend(_sample(_finished_first_rollouts(run), rollouts_per_run, rng))
    sources = services.rating_sources_from_rollouts(rollouts)
    sources += services.rating_sources_from_curations(curations)
    with transaction.atomic():
        campaign = services.campaign_create(
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
            services.campaign_add_pairs(
                campaign=campaign,
                pairs=[(items[f"rollout:{a.pk}"], items[f"rollout:{b.pk}"]) for a, b in paired],
                raters_per_pair=raters_per_pair,
            )
    return campaign


def judge_run_start(*, campaign: RatingCampaign, judge: Judge, user: Any) -> Job:
    if not is_manager(campaign, user):
        raise services.NotAllowed("only staff or the campaign's creator can start a judge")
    running = Job.objects.filter(
        kind="judge",
        params__campaign_id=campaign.pk,
        params__judge_id=judge.pk,
        state__in=[JobState.QUEUED, JobState.RUNNING],
    )
    if running.exists():
        raise services.WrongState(f"judge {judge.name} is already scoring this campaign")
    return services.job_create(
        kind="judge",
        params={"judge_id": judge.pk, "campaign_id": campaign.pk},
        created_by=user,
        total=campaign.items.count(),
    )


# --- shared with the API: analysis figures ------------------------------------------------------


def _pairwise_rows(pairwise: dict[str, Any]) -> tuple[list[str], list[list[Any]]]:
    header = ["dataset", "reference", "others", "n", "wins", "ties", "losses", "win", "tie", "loss"]
    reference = pairwise.get("reference", "")
    others = ", ".join(p for p in pairwise.get("policies", []) if p != reference)
    rows = [
        [dataset, reference, others]
        + [s[key] for key in ("n", "wins", "ties", "losses", "win", "tie", "loss")]
        for dataset, s in sorted(pairwise.get("shares", {}).items())
    ]
    return header, rows


def _judge_score_rows(campaign: RatingCampaign) -> tuple[list[str], list[list[Any]]]:
    items = list(campaign.items.order_by("blind_id"))
    scores = JudgeScore.objects.filter(item__campaign=campaign).select_related("judge")
    by_judge: dict[str, dict[int, JudgeScore]] = {}
    for score in scores:
        by_judge.setdefault(score.judge.name, {})[score.item_id] = score
    human: dict[int, list[int]] = {}
    for item_id, score in RatingAssignment.objects.filter(
        item__campaign=campaign, score__isnull=False
    ).values_list("item_id", "score"):
        human.setdefault(item_id, []).append(score)
    judges = sorted(by_judge)
    header = ["blind_id", "policy", "dataset", "human_mean", "n_human"]
    header += [f"{name} {what}" for name in judges for what in ("score", "reason")]
    rows = []
    for item in items:
        values = human.get(item.pk, [])
        row = [item.blind_id, item.policy_name, item.dataset]
        row += [sum(values) / len(values) if values else None, len(values)]
        for name in judges:
            record = by_judge[name].get(item.pk)
            row += [record.score, record.reason] if record else [None, ""]
        rows.append(row)
    return header, rows


def analysis_figure(
    *, campaign: RatingCampaign, analysis: dict[str, Any], figure: str
) -> tuple[list[str], list[list[Any]]]:
    """One figure's data as a table: the CSV export and its API twin."""
    if figure in ("histograms", "cdfs"):
        series = analysis[figure]
        return ["score", *series], [[s, *(v[s] for v in series.values())] for s in RUBRIC]
    if figure == "spearman":
        names, matrix = analysis["spearman"]["names"], analysis["spearman"]["matrix"]
        return ["", *names], [[name, *row] for name, row in zip(names, matrix, strict=True)]
    if figure == "kappas":
        rows = [[k["a"], k["b"], k["n"], k["kappa"]] for k in analysis["kappas"]]
        return ["rater_a", "rater_b", "n_common", "kappa_quadratic"], rows
    if figure == "disagreement":
        policy = dict(campaign.items.values_list("blind_id", "policy_name"))
        rows = [[d["item"], policy[d["item"]], d["spread"], d["std"]] for d in analysis[figure]]
        return ["blind_id", "policy", "spread", "std"], rows
    if figure == "pairwise":
        return _pairwise_rows(analysis["pairwise"])
    if figure == "strengths":
        strengths = analysis["pairwise"].get("strengths", {})
        rows = [[name, s["estimate"], s["low"], s["high"]] for name, s in strengths.items()]
        return ["policy", "strength", "ci_low", "ci_high"], rows
    if figure == "policy_means":
        return ["policy", "human_mean"], [[p, m] for p, m in analysis["policy_means"].items()]
    if figure == "judge_scores":
        return _judge_score_rows(campaign)
    raise ValueError(f"unknown figure {figure!r}; one of {', '.join(FIGURES)}")


def csv_text(header: list[str], rows: list[list[Any]]) -> str:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(header)
    writer.writerows([["" if v is None else v for v in row] for row in rows])
    return out.getvalue()


# --- campaigns ------------------------------------------------------------------------------------


@require_role(permissions.RATING_READ)
@require_GET
def campaign_list(request: HttpRequest) -> HttpResponse:
    user = request.user
    rating = [
        {"campaign": c, "progress": selectors.rater_progress(campaign=c, rater=user)}
        for c in RatingCampaign.objects.filter(raters=user)
    ]
    managed = RatingCampaign.objects.annotate(n_items=Count("items"))
    if not user.is_staff:
        managed = managed.filter(created_by=user)
    # Managers follow the analysis while a campaign runs, unless they rate in it (blinding).
    rates_in = {row["campaign"].pk for row in rating}
    managed_rows = [{"campaign": c, "analysis": c.closed or c.pk not in rates_in} for c in managed]
    return render(request, "rating/campaign_list.html", {"rating": rating, "managed": managed_rows})


@require_role(permissions.RATING_MANAGE)
@require_http_methods(["GET", "POST"])
def campaign_create(request: HttpRequest) -> HttpResponse:
    if not request.user.is_staff:
        return _forbidden(request, "Only staff can create rating campaigns.")
    form = CampaignForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        pair_runs = (data["pair_run_a"], data["pair_run_b"]) if data["pair_run_a"] else None
        try:
            campaign = campaign_create_from_choices(
                name=data["name"],
                description=data["description"],
                raters=list(data["raters"]),
                raters_per_item=data["raters_per_item"],
                runs=list(data["runs"]),
                rollouts_per_run=data["rollouts_per_run"],
                curations=list(data["curations"]),
                pair_runs=pair_runs,
                raters_per_pair=data["raters_per_pair"] or 1,
                seed=data["seed"],
                created_by=request.user,
            )
        except services.WorkflowError as error:
            form.add_error(None, str(error))
        else:
            return redirect("rating_campaign", campaign_id=campaign.pk)
    return render(request, "rating/campaign_create.html", {"form": form})


def _judge_rows(campaign: RatingCampaign) -> list[dict[str, Any]]:
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


@require_role(permissions.RATING_READ)
@require_GET
def campaign_detail(request: HttpRequest, campaign_id: int) -> HttpResponse:
    campaign = get_campaign_for_user(request, campaign_id)
    user = request.user
    manager, rater = is_manager(campaign, user), is_rater(campaign, user)
    context: dict[str, Any] = {
        "campaign": campaign,
        "manager": manager,
        "n_items": campaign.items.count(),
        "n_pairs": campaign.pairs.count(),
        "my_progress": selectors.rater_progress(campaign=campaign, rater=user) if rater else None,
        "can_see_analysis": selectors.can_see_analysis(campaign=campaign, user=user),
    }
    if manager:
        context["rater_rows"] = [
            {"rater": r, "progress": selectors.rater_progress(campaign=campaign, rater=r)}
            for r in campaign.raters.order_by(get_user_model().USERNAME_FIELD)
        ]
        context["judges"] = _judge_rows(campaign)
    return render(request, "rating/campaign_detail.html", context)


@require_role(permissions.RATING_MANAGE)
@require_POST
def campaign_close(request: HttpRequest, campaign_id: int) -> HttpResponse:
    campaign = get_campaign_for_user(request, campaign_id)
    try:
        services.campaign_close(campaign=campaign, actor=request.user)  # type: ignore[arg-type]
    except services.NotAllowed as error:
        return _forbidden(request, str(error))
    except services.WorkflowError as error:
        messages.error(request, str(error))
    else:
        messages.success(request, "Campaign closed: scores are frozen and the analysis is open.")
    return redirect("rating_campaign", campaign_id=campaign.pk)


# --- the rating page (paper Figure 7) -------------------------------------------------------------


def _previous_assignment(campaign: RatingCampaign, user: Any, position: int | None) -> int | None:
    rows = RatingAssignment.objects.filter(item__campaign=campaign, rater=user)
    if position is not None:
        rows = rows.filter(position__lt=position)
    return (
        rows.filter(score__isnull=False).order_by("-position").values_list("pk", flat=True).first()
    )


def _rate_context(
    campaign: RatingCampaign, user: Any, assignment: RatingAssignment | None, error: str = ""
) -> dict[str, Any]:
    """Plain values only: the template cannot reach the item's policy, source or other scores."""
    item = assignment.item if assignment else None
    return {
        "campaign": campaign_summary(campaign),
        "progress": selectors.rater_progress(campaign=campaign, rater=user),
        "rubric": RUBRIC_ROWS,
        "assignment_id": assignment.pk if assignment else None,
        "my_score": assignment.score if assignment else None,
        "my_comment": assignment.comment if assignment else "",
        "item": rater_item_view(item) if item else None,
        "plot_data": item_plot_data(item) if item else None,
        "previous_id": _previous_assignment(
            campaign, user, assignment.position if assignment else None
        ),
        "error": error,
    }


def _render_rate(
    request: HtmxHttpRequest, context: dict[str, Any], status: int = 200
) -> HttpResponse:
    template = "rating/rate.html#rate-panel" if request.htmx else "rating/rate.html"
    return render(request, template, context, status=status)


def _form_error(form: ScoreForm | PairForm) -> str:
    return " ".join(str(message) for errors in form.errors.values() for message in errors)


def _rate_submit(request: HtmxHttpRequest, campaign: RatingCampaign) -> HttpResponse:
    user = request.user
    form = ScoreForm(request.POST)
    assignment = own_assignment(campaign, user, request.POST.get("assignment"))
    if assignment is None:
        error = "this item is not in your list for this campaign; reload the page"
        return _render_rate(request, _rate_context(campaign, user, None, error), status=400)
    if not form.is_valid():
        context = _rate_context(campaign, user, assignment, _form_error(form))
        return _render_rate(request, context, status=400)
    try:
        services.rating_submit(
            assignment=assignment,
            rater=user,  # type: ignore[arg-type]
            score=form.cleaned_data["score"],
            comment=form.cleaned_data["comment"],
        )
    except services.WorkflowError as error:
        context = _rate_context(campaign, user, assignment, str(error))
        return _render_rate(request, context, status=_status_for(error))
    if not request.htmx:
        return redirect("rating_rate", campaign_id=campaign.pk)
    next_one = selectors.rater_queue(campaign=campaign, rater=user).first()
    return _render_rate(request, _rate_context(campaign, user, next_one))


@require_role(permissions.RATE)
@require_http_methods(["GET", "POST"])
def rate(request: HtmxHttpRequest, campaign_id: int) -> HttpResponse:
    campaign = get_campaign_for_user(request, campaign_id)
    if not is_rater(campaign, request.user):
        return _forbidden(request, "You are not a rater of this campaign.")
    if request.method == "POST":
        return _rate_submit(request, campaign)
    assignment = None
    if request.GET.get("assignment"):
        assignment = own_assignment(campaign, request.user, request.GET["assignment"])
        if assignment is None:
            raise Http404("no such item in your list")
    elif not campaign.closed:
        assignment = selectors.rater_queue(campaign=campaign, rater=request.user).first()
    return _render_rate(request, _rate_context(campaign, request.user, assignment))


# --- pairwise comparisons ---------------------------------------------------------------------


def _pairs_context(
    campaign: RatingCampaign, user: Any, judgement: PairJudgement | None, error: str = ""
) -> dict[str, Any]:
    pair = judgement.pair if judgement else None
    return {
        "campaign": campaign_summary(campaign),
        "progress": selectors.rater_progress(campaign=campaign, rater=user),
        "outcomes": OUTCOME_KEYS,
        "judgement_id": judgement.pk if judgement else None,
        "left": rater_item_view(pair.left) if pair else None,
        "right": rater_item_view(pair.right) if pair else None,
        "left_plot": item_plot_data(pair.left) if pair else None,
        "right_plot": item_plot_data(pair.right) if pair else None,
        "error": error,
    }


def _render_pairs(
    request: HtmxHttpRequest, context: dict[str, Any], status: int = 200
) -> HttpResponse:
    template = "rating/pairs.html#pair-panel" if request.htmx else "rating/pairs.html"
    return render(request, template, context, status=status)


def _pair_submit(request: HtmxHttpRequest, campaign: RatingCampaign) -> HttpResponse:
    user = request.user
    form = PairForm(request.POST)
    judgement = own_judgement(campaign, user, request.POST.get("judgement"))
    if judgement is None:
        error = "this pair is not in your list for this campaign; reload the page"
        return _render_pairs(request, _pairs_context(campaign, user, None, error), status=400)
    if not form.is_valid():
        context = _pairs_context(campaign, user, judgement, _form_error(form))
        return _render_pairs(request, context, status=400)
    try:
        services.pair_judgement_submit(
            judgement=judgement,
            rater=user,  # type: ignore[arg-type]
            outcome=form.cleaned_data["outcome"],
        )
    except services.WorkflowError as error:
        context = _pairs_context(campaign, user, judgement, str(error))
        return _render_pairs(request, context, status=_status_for(error))
    if not request.htmx:
        return redirect("rating_pairs", campaign_id=campaign.pk)
    next_one = rater_pair_queue(campaign=campaign, rater=user).first()
    return _render_pairs(request, _pairs_context(campaign, user, next_one))


@require_role(permissions.RATE)
@require_http_methods(["GET", "POST"])
def pairs(request: HtmxHttpRequest, campaign_id: int) -> HttpResponse:
    campaign = get_campaign_for_user(request, campaign_id)
    if not is_rater(campaign, request.user):
        return _forbidden(request, "You are not a rater of this campaign.")
    if request.method == "POST":
        return _pair_submit(request, campaign)
    judgement = None
    if not campaign.closed:
        judgement = (
            rater_pair_queue(campaign=campaign, rater=request.user)
            .select_related("pair__left__task", "pair__right__task")
            .first()
        )
    return _render_pairs(request, _pairs_context(campaign, request.user, judgement))


# --- analysis (paper Figure 4) --------------------------------------------------------------------


@require_role(permissions.RATING_READ)
@require_GET
def analysis(request: HttpRequest, campaign_id: int) -> HttpResponse:
    campaign = get_campaign_for_user(request, campaign_id)
    if not selectors.can_see_analysis(campaign=campaign, user=request.user):
        return _forbidden(request, ANALYSIS_HIDDEN)
    data = selectors.campaign_analysis(campaign=campaign)
    policy = dict(campaign.items.values_list("blind_id", "policy_name"))
    disagreement = [row | {"policy": policy[row["item"]]} for row in data["disagreement"]]
    context = {
        "campaign": campaign,
        "analysis": data,
        "analysis_chart": charts.analysis_chart_data(data),
        "disagreement": disagreement,
        "figures": FIGURES,
        "rubric": RUBRIC_ROWS,
    }
    return render(request, "rating/analysis.html", context)


@require_role(permissions.RATING_READ)
@require_GET
def analysis_csv(request: HttpRequest, campaign_id: int, figure: str) -> HttpResponse:
    campaign = get_campaign_for_user(request, campaign_id)
    if figure not in FIGURES:
        raise Http404(f"unknown figure {figure!r}")
    if not selectors.can_see_analysis(campaign=campaign, user=request.user):
        return _forbidden(request, ANALYSIS_HIDDEN)
    data = selectors.campaign_analysis(campaign=campaign)
    header, rows = analysis_figure(campaign=campaign, analysis=data, figure=figure)
    response = HttpResponse(csv_text(header, rows), content_type="text/csv; charset=utf-8")
    filename = f"campaign-{campaign.pk}-{figure}.csv"
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


@require_role(permissions.RATING_READ)
@require_GET
def item_detail(request: HttpRequest, campaign_id: int, blind_id: str) -> HttpResponse:
    campaign = get_campaign_for_user(request, campaign_id)
    if not selectors.can_see_analysis(campaign=campaign, user=request.user):
        return _forbidden(request, ANALYSIS_HIDDEN)
    item = get_object_or_404(
        CampaignItem.objects.select_related("task", "spectrum"),
        campaign=campaign,
        blind_id=blind_id,
    )
    context = {
        "campaign": campaign,
        "item": item,
        "view": rater_item_view(item),
        "plot_data": item_plot_data(item, blinded=False),
        "policy": item.data.get("policy") or {},
        "ratings": item.assignments.filter(score__isnull=False).select_related("rater"),
        "pending": item.assignments.filter(score__isnull=True).count(),
        "judge_scores": item.judge_scores.select_related("judge").order_by("judge__name"),
        "rubric": RUBRIC,
    }
    return render(request, "rating/item_detail.html", context)


# --- LLM judges -------------------------------------------------------------------------------


@require_role(permissions.RATING_MANAGE)
@require_http_methods(["GET", "POST"])
def judge_list(request: HttpRequest) -> HttpResponse:
    if not request.user.is_staff:
        return _forbidden(request, "Only staff can manage LLM judges.")
    form = JudgeForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            judge = services.judge_create(actor=request.user, **form.cleaned_data)  # type: ignore[arg-type]
        except services.WorkflowError as error:
            form.add_error(None, str(error))
        else:
            messages.success(request, f"Judge {judge.name} added.")
            return redirect("rating_judges")
    judges = (
        Judge.objects.select_related("endpoint").annotate(n_scores=Count("scores")).order_by("name")
    )
    return render(request, "rating/judge_list.html", {"form": form, "judges": judges})


@require_role(permissions.RATING_MANAGE)
@require_POST
def judge_run(request: HttpRequest, campaign_id: int, judge_id: int) -> HttpResponse:
    campaign = get_campaign_for_user(request, campaign_id)
    judge = get_object_or_404(Judge, pk=judge_id)
    try:
        job = judge_run_start(campaign=campaign, judge=judge, user=request.user)
    except services.NotAllowed as error:
        return _forbidden(request, str(error))
    except services.WorkflowError as error:
        messages.error(request, str(error))
    else:
        messages.success(request, f"Judge {judge.name} is scoring the campaign (job {job.pk}).")
    return redirect("rating_campaign", campaign_id=campaign.pk)
