"""Every read that is more than a one-line lookup."""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from threading import Lock
from typing import Any

import numpy as np
import yaml
from django.conf import settings
from django.db.models import Count, Exists, Max, Min, OuterRef, Q, QuerySet

from agent import tasks as agent_tasks
from agent.spectra import Spectrum as SpectrumValue
from agent.spectra import spectrum_from_npz_bytes
from agent.tool import SpectralVisualizationTool, ToolResult
from agent.trajectory import Trajectory
from annotation.models import (
    Audit,
    AuditLog,
    Candidate,
    CandidateState,
    Curation,
    CurationState,
    InspectionRun,
    JudgeScore,
    LiveStep,
    PairJudgement,
    PolicyCheckpoint,
    RatingAssignment,
    RatingCampaign,
    Spectrum,
    Task,
    TrainingMetric,
    TrainingRun,
    TrajectoryVersion,
    Vote,
)


@dataclass(frozen=True)
class SpectrumFilters:
    task: str = ""
    label: str = ""
    survey: str = ""
    dataset: str = ""
    q: str = ""


def spectrum_list(*, filters: SpectrumFilters) -> QuerySet[Spectrum]:
    rows = Spectrum.objects.select_related("task").defer("arrays", "meta")
    if filters.task:
        rows = rows.filter(task__code__iexact=filters.task)
    if filters.label:
        rows = rows.filter(label=filters.label.upper())
    if filters.survey:
        rows = rows.filter(survey=filters.survey)
    if filters.dataset:
        rows = rows.filter(dataset=filters.dataset)
    if filters.q:
        rows = rows.filter(object_id__icontains=filters.q)
    return rows.order_by("id")


def spectrum_filter_choices() -> dict[str, list[str]]:
    return {
        "surveys": list(Spectrum.objects.order_by().values_list("survey", flat=True).distinct()),
        "datasets": list(Spectrum.objects.order_by().values_list("dataset", flat=True).distinct()),
        "tasks": list(Task.objects.values_list("code", flat=True)),
    }


def task_value(task: Task) -> agent_tasks.Task:
    """The agent's Task value for a database row (built-in or added by an expert)."""
    return agent_tasks.task_from_dict(
        {
            "code": task.code,
            "name": task.name,
            "question": task.question,
            "guideline": task.guideline,
            "windows": task.windows,
            "contaminants": task.contaminants,
        }
    )


class _ToolCache:
    """Per-process LRU of visualization tools, so repeated renders reuse the cached arrays."""

    def __init__(self, size: int = 32) -> None:
        self._size = size
        self._tools: OrderedDict[tuple[int, str], SpectralVisualizationTool] = OrderedDict()
        self._lock = Lock()

    def get(self, row: Spectrum) -> SpectralVisualizationTool:
        key = (row.pk, row.content_hash)
        with self._lock:
            tool = self._tools.get(key)
            if tool is not None:
                self._tools.move_to_end(key)
                return tool
        tool = SpectralVisualizationTool(spectrum_value(row))
        with self._lock:
            self._tools[key] = tool
            while len(self._tools) > self._size:
                self._tools.popitem(last=False)
        return tool


_tools = _ToolCache()


def spectrum_value(row: Spectrum) -> SpectrumValue:
    value = spectrum_from_npz_bytes(bytes(row.arrays))
    value.object_id = row.object_id
    value.survey = row.survey
    value.redshift = row.redshift
    return value


def spectrum_tool(row: Spectrum) -> SpectralVisualizationTool:
    return _tools.get(row)


def spectrum_render(
    *, row: Spectrum, wavelength_range: Any = None, label: str | None = None
) -> ToolResult:
    tool = spectrum_tool(row)
    if wavelength_range is None:
        return tool.render_full()
    return tool.render(wavelength_range, label=label)


def _finite_or_none(values: np.ndarray) -> list[float | None]:
    """Plain floats with None for NaN and inf (a gap in the plot). Built with tolist(): a page
    with a plot converts three arrays of thousands of pixels on every request."""
    out: list[float | None] = np.asarray(values, dtype=float).tolist()
    for index in np.flatnonzero(~np.isfinite(values)).tolist():
        out[index] = None
    return out


PLOT_DIGITS = 7  # float32 precision, what surveys store; more digits only lengthen the page


def _plot_values(values: np.ndarray) -> list[float | None]:
    """Rounded to PLOT_DIGITS significant digits of the largest value, far below what a plot
    can show: the flux, error band and hover text need no more, and the page halves in size."""
    finite = np.isfinite(values)
    scale = float(np.max(np.abs(values[finite]))) if finite.any() else 0.0
    decimals = PLOT_DIGITS - 1 - math.floor(math.log10(scale)) if scale > 0 else 0
    if scale > 0 and abs(decimals) < 300:
        values = np.round(values, decimals)
    return _finite_or_none(values)


def spectrum_plot_data(*, row: Spectrum, task: Task | None) -> dict[str, Any]:
    """What the interactive plot needs: rest-frame arrays with gaps, error band, markers."""
    value = spectrum_value(row)
    wave = value.rest_wavelength
    flux = np.where(value.good, value.flux, np.nan)
    error: np.ndarray | None = None
    if value.ivar is not None:
        with np.errstate(divide="ignore", invalid="ignore"):
            error = np.where(value.good & (value.ivar > 0), 1.0 / np.sqrt(value.ivar), np.nan)
    windows = task.windows if task is not None else []
    return {
        "object_id": row.object_id,
        "rest_frame": bool(row.redshift),
        "redshift": row.redshift,
        "wavelength": [round(w, 3) for w in np.asarray(wave, dtype=float).tolist()],
        "flux": _plot_values(flux),
        "lower": _plot_values(flux - error) if error is not None else None,
        "upper": _plot_values(flux + error) if error is not None else None,
        "windows": [
            {
                "name": window["name"],
                "range": window["rest_range"],
                "lines": window.get("lines", []),
                "kind": window.get("kind", ""),
            }
            for window in windows
        ],
    }


# --- curation --------------------------------------------------------------------------------


def curation_queues(*, user: Any) -> dict[str, QuerySet[Curation]]:
    """What is waiting for this expert, by stage (the "My work" page)."""
    base = Curation.objects.select_related("task", "spectrum", "reviser")
    audited_this_round = Audit.objects.filter(
        curation=OuterRef("pk"), round=OuterRef("audit_round"), auditor=user
    )
    voted = Vote.objects.filter(curation=OuterRef("pk"), voter=user)
    return {
        "screening": base.filter(state=CurationState.SCREENING),
        "revise": base.filter(
            state__in=[CurationState.IN_REVISION, CurationState.CHANGES_REQUESTED], reviser=user
        ),
        "claim_revision": base.filter(state=CurationState.IN_REVISION, reviser__isnull=True),
        "audit": base.filter(state=CurationState.IN_AUDIT)
        .filter(Q(auditor_1=user) | Q(auditor_2=user))
        .exclude(Exists(audited_this_round)),
        "claim_audit": base.filter(state=CurationState.IN_AUDIT)
        .filter(Q(auditor_1__isnull=True) | Q(auditor_2__isnull=True))
        .exclude(reviser=user)
        .exclude(auditor_1=user)
        .exclude(auditor_2=user),
        "vote": base.filter(state=CurationState.IN_VOTE)
        .filter(Q(reviser=user) | Q(auditor_1=user) | Q(auditor_2=user))
        .exclude(Exists(voted)),
    }


def curation_list(*, state: str = "", task: str = "") -> QuerySet[Curation]:
    rows = Curation.objects.select_related("task", "spectrum", "reviser", "auditor_1", "auditor_2")
    if state:
        rows = rows.filter(state=state)
    if task:
        rows = rows.filter(task__code__iexact=task)
    return rows.order_by("-updated_at", "-id")


def version_trajectory(version: TrajectoryVersion) -> Trajectory:
    from annotation.services import trajectory_from_stored

    return trajectory_from_stored(version.data)


def head_version(curation: Curation) -> TrajectoryVersion:
    return curation.versions.get(number=curation.head_number)


def audits_visible_to(*, curation: Curation, user: Any) -> list[Audit]:
    """Audits this user may see: their own always; others' once both of that round are in.

    Auditors never see each other's verdict before both are in (independent audits).
    """
    audits = list(curation.audits.select_related("auditor").order_by("round", "id"))
    per_round: dict[int, int] = {}
    for audit in audits:
        per_round[audit.round] = per_round.get(audit.round, 0) + 1
    return [a for a in audits if a.auditor_id == user.pk or per_round[a.round] >= 2]


def votes_visible_to(*, curation: Curation, user: Any) -> list[Vote]:
    """Each voter's choice is shown once all three have voted; before that, only your own."""
    votes = list(curation.votes.select_related("voter"))
    if curation.state in (CurationState.ACCEPTED, CurationState.REJECTED):
        return votes
    return [vote for vote in votes if vote.voter_id == user.pk]


def curation_history(*, curation: Curation) -> QuerySet[AuditLog]:
    return AuditLog.objects.filter(
        object_type="Curation", object_pk=str(curation.pk)
    ).select_related("actor")


def accepted_curations(*, task: str = "") -> QuerySet[Curation]:
    rows = Curation.objects.filter(state=CurationState.ACCEPTED).select_related("task", "spectrum")
    if task:
        rows = rows.filter(task__code__iexact=task)
    return rows.order_by("id")


# --- inspection runs ----------------------------------------------------------------------------


def run_progress(*, run: InspectionRun) -> dict[str, Any]:
    counts = dict(
        run.candidates.order_by()
        .values_list("state")
        .annotate(n=Count("id"))
        .values_list("state", "n")
    )
    total = sum(counts.values())
    done = counts.get(CandidateState.DONE, 0)
    failed = counts.get(CandidateState.FAILED, 0)
    cancelled = counts.get(CandidateState.CANCELLED, 0)
    times = run.candidates.filter(state=CandidateState.DONE).aggregate(
        first=Min("started_at"), last=Max("finished_at")
    )
    per_minute = None
    if done and times["first"] and times["last"] and times["last"] > times["first"]:
        per_minute = done / ((times["last"] - times["first"]).total_seconds() / 60.0)
    return {
        "total": total,
        "done": done,
        "failed": failed,
        "cancelled": cancelled,
        "running": counts.get(CandidateState.RUNNING, 0),
        "pending": counts.get(CandidateState.PENDING, 0),
        "remaining": total - done - failed - cancelled,
        "finished": total == done + failed + cancelled,
        "percent": round(100 * (done + failed + cancelled) / total) if total else 100,
        "per_minute": per_minute,
        "needs_expert": run.candidates.filter(needs_expert=True).count(),
    }


def run_metrics(*, run: InspectionRun) -> dict[str, Any] | None:
    """On a labelled set: F1/accuracy, the reliability diagram and the F1-coverage curve."""
    from agent.calibration import expected_calibration_error, f1_coverage_curve, reliability_bins
    from agent.metrics import classification_report

    rows = list(
        run.candidates.filter(
            state=CandidateState.DONE, spectrum__task=run.task, spectrum__label__in=["YES", "NO"]
        ).values_list("spectrum__label", "verdict", "confidence")
    )
    if not rows:
        return None
    labels = [label for label, _, _ in rows]
    predictions = [verdict or None for _, verdict, _ in rows]
    confidences = [min(1.0, max(0.0, confidence or 0.0)) for _, _, confidence in rows]
    report = classification_report(labels, predictions)
    bins = reliability_bins(
        confidences, [p == t for p, t in zip(predictions, labels, strict=True)], n_bins=10
    )
    curve = f1_coverage_curve(labels, predictions, confidences)
    return {
        "n": report.n,
        "accuracy": report.accuracy,
        "f1": report.f1,
        "precision": report.precision,
        "recall": report.recall,
        "confusion": report.confusion.as_dict(),
        "ece": expected_calibration_error(bins),
        "reliability": [
            {
                "low": b.low,
                "high": b.high,
                "count": b.count,
                "confidence": b.mean_confidence,
                "accuracy": b.accuracy,
            }
            for b in bins
        ],
        "coverage": [
            {
                "coverage": p.coverage,
                "threshold": p.threshold,
                "f1": p.f1,
                "accuracy": p.accuracy,
                "n": p.n_automatic,
            }
            for p in curve
        ],
    }


def live_steps_after(*, candidate: Candidate, after: int) -> list[LiveStep]:
    return list(candidate.live_steps.filter(pk__gt=after).order_by("id"))


def inspected_ranges(steps: list[dict[str, Any]]) -> list[list[float]]:
    """The windows a trajectory's tool calls looked at (for shading the plot)."""
    ranges = []
    for step in steps:
        result = step.get("tool_result") or {}
        image = result.get("image") or {}
        if image.get("wavelength_range"):
            ranges.append(image["wavelength_range"])
    return ranges


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
    from agent.agreement import bradley_terry_bootstrap, win_tie_loss

    judgements = PairJudgement.objects.filter(pair__campaign=campaign).exclude(outcome="")
    rows = judgements.select_related("pair__left", "pair__right")
    policies = sorted(
        {name for j in rows for name in (j.pair.left.policy_name, j.pair.right.policy_name)}
    )
    if len(policies) < 2:
        return {"policies": policies, "shares": {}, "strengths": {}}
    reference = policies[0]
    outcomes: dict[str, list[str]] = {}
    comparisons: list[tuple[str, ...]] = []
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
    by_rater: dict[str, dict[str, int]] = {}
    by_item: dict[str, dict[str, int]] = {}
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


# --- training runs ------------------------------------------------------------------------------

# preset -> suffix of training/configs/<stage>_<suffix>.yaml
TRAINING_PRESETS = {"cpu-tiny": "cpu_tiny", "gpu": "gpu"}
# Keys of a preset file that choose data or outputs; a run from the app sets its own.
TRAINING_DATA_KEYS = frozenset(
    {
        "model_name_or_path",
        "output_dir",
        "run_name",
        "metrics_jsonl",
        "trajectories",
        "sharegpt",
        "smoke_tasks",
        "smoke_samples_per_task",
        "specvi_mini_tasks",
        "specvi_mini_split",
        "specvi_mini_positives",
        "specvi_mini_negatives",
        "specvi_mini_seed",
        "verl_parquet",
    }
)
# The curves of paper Figure 6 (names from training.callbacks).
CHART_METRICS = (
    "loss",
    "reward_mean",
    "tool_calls_mean",
    "val_tool_calls_mean",
    "response_length_mean",
    "val_f1",
    "batch_f1",
)


def training_preset_path(*, stage: str, preset: str) -> Path:
    return settings.BASE_DIR / "training" / "configs" / f"{stage}_{TRAINING_PRESETS[preset]}.yaml"


def training_preset_values(*, stage: str, preset: str) -> dict[str, Any]:
    """The values of a preset's YAML file (read with the same rules as training.config)."""
    path = training_preset_path(stage=stage, preset=preset)
    values = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    if not isinstance(values, dict):
        raise ValueError(f"config file {path} must hold a YAML mapping of field names to values")
    return values


def training_output_root() -> Path:
    return Path(settings.TRAINING_OUTPUT_ROOT)


def label_only_spectra(
    *, dataset: str, split: str, tasks: list[str], limit: int
) -> QuerySet[Spectrum]:
    """Spectra labelled YES or NO for one of ``tasks``: the rows GRPO learns from."""
    rows = Spectrum.objects.filter(
        dataset=dataset, task__code__in=tasks, label__in=["YES", "NO"]
    ).select_related("task")
    if split:
        rows = rows.filter(split=split)
    return rows.order_by("id")[:limit]


def training_runs() -> QuerySet[TrainingRun]:
    return TrainingRun.objects.select_related(
        "job", "dataset_export", "created_by", "checkpoint", "base_checkpoint"
    ).order_by("-id")


def training_progress(*, run: TrainingRun) -> dict[str, Any]:
    job = run.job
    latest: dict[str, float] = {}
    last_step = run.metrics.filter(name__in=CHART_METRICS).order_by("-step").first()
    if last_step is not None:
        latest = dict(
            run.metrics.filter(step=last_step.step, name__in=CHART_METRICS).values_list(
                "name", "value"
            )
        )
    return {
        "state": job.state,
        "finished": job.finished,
        "step": job.done,
        "total": job.total,
        "percent": job.percent,
        "error": job.error,
        "latest_step": last_step.step if last_step else None,
        "latest": latest,
    }


def training_chart_points(*, run: TrainingRun, after: int = 0) -> dict[str, Any]:
    """Figure 6 series recorded after metric row ``after``: {last_id, series: {name: {x, y}}}."""
    rows = (
        run.metrics.filter(pk__gt=after, name__in=CHART_METRICS)
        .order_by("id")
        .values_list("id", "name", "step", "value")
    )
    series: dict[str, dict[str, list[float]]] = {name: {"x": [], "y": []} for name in CHART_METRICS}
    last_id = after
    for pk, name, step, value in rows:
        series[name]["x"].append(step)
        series[name]["y"].append(value)
        last_id = max(last_id, pk)
    return {"last_id": last_id, "series": series}


def training_metrics(
    *, run: TrainingRun, names: list[str] | None = None, after: int = 0
) -> QuerySet[TrainingMetric]:
    rows = run.metrics.filter(pk__gt=after)
    if names:
        rows = rows.filter(name__in=names)
    return rows.order_by("id")


def policy_checkpoints() -> QuerySet[PolicyCheckpoint]:
    return PolicyCheckpoint.objects.select_related("run", "created_by").order_by("-id")


def checkpoint_for_policy_spec(spec: dict[str, Any]) -> PolicyCheckpoint | None:
    """The registered checkpoint an inspection run's policy loads, when it is one."""
    if spec.get("kind") != "transformers" or not spec.get("model_path"):
        return None
    return PolicyCheckpoint.objects.filter(path=str(spec["model_path"])).first()


def lineage_summary(lineage: dict[str, Any]) -> dict[str, Any]:
    """What a policy chooser shows of a lineage: data, base model and the main settings."""
    config = lineage.get("config") or {}
    training = config.get("SpecvetSFTConfig") or config.get("SpecvetGRPOConfig") or {}
    model = config.get("ModelArguments") or {}
    dataset = lineage.get("dataset") or {}
    sources = dataset.get("sources") or {}
    base = lineage.get("base_lineage") or {}
    return {
        "stage": lineage.get("stage", ""),
        "base_model": lineage.get("base_model", ""),
        "base_stage": base.get("stage", ""),
        "dataset_version": lineage.get("dataset_version", ""),
        "rows": dataset.get("rows"),
        "dataset_export": sources.get("dataset_export"),
        "label_source": sources.get("label_source"),
        "learning_rate": training.get("learning_rate"),
        "num_train_epochs": training.get("num_train_epochs"),
        "max_steps": training.get("max_steps"),
        "use_lora": model.get("use_lora"),
        "lora_r": model.get("lora_r") if model.get("use_lora") else None,
        "created_at": lineage.get("created_at", ""),
        "code_version": lineage.get("code_version", ""),
        "metrics": lineage.get("metrics") or {},
    }
