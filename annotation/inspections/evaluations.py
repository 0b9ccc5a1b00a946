"""Evaluations: one policy on the real corpus (development, validation) beside SpecVI-mini.

The figures every page and the README report come from here or from ``manage.py evaluate``:
per task accuracy, balanced accuracy, positive-class F1, expected calibration error, answers
wrong at confidence >= 0.9, and the triage curve (F1 of what is decided automatically when the
least confident 0-30 % are deferred to experts). Real spectra come first; the synthetic part is
labelled as such wherever it is shown.

An evaluation is a background Job of kind "evaluation": ``evaluation_start`` (the service)
records it, ``run_evaluation`` (its runner, registered in AppConfig.ready) fills its result,
``evaluation_jobs`` and ``evaluation_table`` read it back.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import QuerySet

from annotation.core import services as core_services
from annotation.core.errors import WorkflowError
from annotation.core.jobs import runner
from annotation.core.models import Job, JobState
from annotation.inspections.run_policies import policy_spec_check

if TYPE_CHECKING:
    from agent.real_evaluation import Baseline
    from agent.splits import SplitMembers

JOB_KIND = "evaluation"
# Real corpus parts first: development (tuned on) and validation (never tuned on).
REAL_PARTS = ("development", "validation")
# Shown as "tuned on", so not checked against a checkpoint's training spectra: a model trained on
# development spectra may still be scored there (the label says so); every other part is refused.
TUNED_PARTS = ("development",)
SYNTHETIC_PART = "synthetic"
# The team's own evaluation set: spectra with a label from expert vetting (spectra.labels).
VETTED_PART = "vetted"
PART_LABELS = {
    "development": "real, development (tuned on)",
    "validation": "real, validation (never tuned on)",
    VETTED_PART: "real, vetted by the team (expert labels)",
    SYNTHETIC_PART: "synthetic (SpecVI-mini test split)",
}
DEFAULT_TASKS = ("CV", "CS", "SS", "MG", "WD", "O", "B", "A")
MAX_SYNTHETIC_PER_TASK = 200
MAX_VETTED_PER_TASK = 500  # the newest labels first; bounds the job's memory


@transaction.atomic
def evaluation_start(
    *,
    policy_spec: dict[str, Any],
    tasks: list[str],
    synthetic_per_task: int,
    max_tool_calls: int,
    actor: User,
    vetted_per_task: int = MAX_VETTED_PER_TASK,
) -> Job:
    """Record an evaluation job for ``policy_spec`` (checked as an inspection run's is)."""
    from agent.inspection_tasks import UnknownTaskError, get_task

    if not tasks:
        raise WorkflowError("choose at least one task to evaluate")
    try:
        codes = [get_task(code).code for code in tasks]
    except UnknownTaskError as error:
        raise WorkflowError(str(error)) from None
    if not 0 <= synthetic_per_task <= MAX_SYNTHETIC_PER_TASK:
        raise WorkflowError(
            f"synthetic spectra per task must be 0-{MAX_SYNTHETIC_PER_TASK}; "
            f"got {synthetic_per_task}"
        )
    if not 0 <= vetted_per_task <= MAX_VETTED_PER_TASK:
        raise WorkflowError(
            f"vetted spectra per task must be 0-{MAX_VETTED_PER_TASK}; got {vetted_per_task}"
        )
    spec, _ = policy_spec_check(policy_spec, user=actor)
    _refuse_trained_on(spec, _vetted_members(codes, vetted_per_task))
    return core_services.job_create(
        kind=JOB_KIND,
        params={
            "policy": spec,
            "tasks": codes,
            "synthetic_per_task": synthetic_per_task,
            "vetted_per_task": vetted_per_task,
            "max_tool_calls": max_tool_calls,
        },
        created_by=actor,
    )


def _samples(params: dict[str, Any]) -> dict[str, list[Any]]:
    """part -> evaluation samples; a real part is empty when the corpus cache is not built."""
    from agent import real_evaluation as real_bench
    from agent.evaluation import specvi_mini_samples
    from agent.real_corpus import CorpusUnavailable

    tasks = params["tasks"]
    parts: dict[str, list[Any]] = {}
    for part in REAL_PARTS:
        try:
            parts[part] = real_bench.real_eval_samples(part, tasks)
        except CorpusUnavailable:
            parts[part] = []
    parts[VETTED_PART] = vetted_samples(tasks, params.get("vetted_per_task", 0))
    per_task = params["synthetic_per_task"]
    if per_task:
        synthetic = specvi_mini_samples(split="test", tasks=tasks)
        chosen: list[Any] = []
        for task in tasks:
            chosen.extend([s for s in synthetic if s.task == task][:per_task])
        parts[SYNTHETIC_PART] = chosen
    return parts


def vetted_samples(tasks: list[str], per_task: int) -> list[Any]:
    """One sample per spectrum with a vetted label for a task (the newest ``per_task`` labels
    of each task), each sample carrying its own spectrum and its own label."""
    from agent.evaluation import EvalSample
    from annotation.spectra.selectors import spectrum_value, vetted_labels

    samples: list[Any] = []
    if per_task <= 0:
        return samples
    for task in tasks:
        rows = vetted_labels(task_codes=[task]).order_by("-labelled_at", "-id")[:per_task]
        for row in rows:
            samples.append(
                EvalSample(
                    f"vetted-{row.spectrum_id}-{task}",
                    task,
                    row.value,
                    spectrum_value(row.spectrum),
                )
            )
    return samples


def vetted_spectra(samples: list[Any]) -> list[list[Any]]:
    """[spectrum id, task code] of each vetted sample (``vetted_samples`` names them
    "vetted-<spectrum id>-<task code>"): a result records them, so a reader who may not see one
    of their labels (annotation.gold_masking) is not shown figures computed over it."""
    keys = []
    for sample in samples:
        _, spectrum_id, task = sample.sample_id.split("-", 2)
        keys.append([int(spectrum_id), task])
    return keys


def _vetted_members(tasks: list[str], per_task: int) -> SplitMembers:
    """The spectra ``vetted_samples`` would pick, by the object ids and content hashes the site
    stored (no arrays read)."""
    from agent.splits import SplitMembers
    from annotation.spectra.selectors import vetted_labels

    ids: set[str] = set()
    hashes: set[str] = set()
    for task in tasks if per_task > 0 else []:
        rows = vetted_labels(task_codes=[task]).order_by("-labelled_at", "-id")[:per_task]
        for object_id, content_hash in rows.values_list(
            "spectrum__object_id", "spectrum__content_hash"
        ):
            ids.update([object_id] if object_id else [])
            hashes.update([content_hash] if content_hash else [])
    return SplitMembers(f"the {VETTED_PART} evaluation part", frozenset(ids), frozenset(hashes))


def _refuse_trained_on(spec: dict[str, Any], *parts: SplitMembers) -> None:
    """WorkflowError naming the spectra of ``parts`` that the checkpoint ``spec`` loads trained
    on (its ``specvet_training_spectra.json``, base checkpoints' included): a model scored on
    spectra it saw says nothing about the ones it did not (issue 33 item 6)."""
    from agent.splits import SplitOverlap, TrainingSpectraError, check_evaluation_disjoint

    for part in parts:
        try:
            check_evaluation_disjoint(spec, part)
        except (SplitOverlap, TrainingSpectraError) as error:
            raise WorkflowError(
                f"{error}; evaluate this checkpoint on spectra it was not trained on"
            ) from None


def _finite(value: float | None) -> float | None:
    return None if value is None or math.isnan(value) else round(float(value), 4)


@runner(JOB_KIND)
def run_evaluation(job: Job) -> dict[str, Any]:
    from agent import evaluation
    from agent import real_evaluation as real_bench
    from agent.splits import SplitMembers
    from annotation.inspections.run_policies import policy_for

    params = job.params
    parts = _samples(params)
    _refuse_trained_on(
        params["policy"],
        *(
            SplitMembers.of_spectra(f"the {part} evaluation part", (s.spectrum for s in samples))
            for part, samples in parts.items()
            if part not in TUNED_PARTS
        ),
    )
    total = sum(len(samples) for samples in parts.values())
    core_services.job_set_total(job_id=job.pk, total=total)
    policy = policy_for(params["policy"])
    results: dict[str, Any] = {}
    inputs: dict[str, Any] = {}
    for part, samples in parts.items():
        if not samples:
            continue
        if core_services.job_is_cancelled(job_id=job.pk):
            return {"cancelled": True}
        report = evaluation.evaluate(
            samples,
            policy,
            benchmark=_benchmark(part),
            split="test" if part == SYNTHETIC_PART else part,
            max_tool_calls=params["max_tool_calls"],
            on_result=lambda *_: core_services.job_progress(job_id=job.pk, done=1),
        )
        results[part] = report.samples
        inputs[part] = report.inputs
    table = real_bench.side_by_side(results, params["tasks"])
    return {
        "policy": params["policy"],
        "parts": [part for part in parts if part in results],
        "missing_parts": [part for part, samples in parts.items() if not samples],
        "vetted_spectra": vetted_spectra(parts.get(VETTED_PART, [])),
        "inputs": inputs,
        "tasks": {
            task: {
                part: {
                    "n": r.n,
                    "positives": r.positives,
                    "accuracy": _finite(r.accuracy),
                    "balanced_accuracy": _finite(r.balanced_accuracy),
                    "f1": _finite(r.f1),
                    "ece": _finite(r.ece),
                    "confident_wrong": r.confident_wrong,
                    "triage": [[deferral, _finite(f1)] for deferral, f1 in r.triage],
                }
                for part, r in by_part.items()
            }
            for task, by_part in table.items()
        },
    }


def _benchmark(part: str) -> str:
    if part == VETTED_PART:
        return "specvet-vetted"
    return "real-corpus" if part in REAL_PARTS else "specvi-mini"


# --- reads ---------------------------------------------------------------------------------------


def evaluation_jobs() -> QuerySet[Job]:
    return Job.objects.filter(kind=JOB_KIND).select_related("created_by").order_by("-id")


def latest_finished(jobs: QuerySet[Job]) -> Job | None:
    return jobs.filter(state=JobState.SUCCEEDED).first()


def recent_durations(jobs: QuerySet[Job], *, limit: int = 5) -> list[dict[str, Any]]:
    """How long the last finished evaluations took (seconds), with their policy: the page's time
    estimate is what this installation measured, not a promise (it said "about half a minute"
    of a 69 s job)."""
    finished = jobs.filter(
        state=JobState.SUCCEEDED, started_at__isnull=False, finished_at__isnull=False
    )
    return [
        {
            "seconds": round((job.finished_at - job.started_at).total_seconds()),
            "policy": policy_label((job.result or {}).get("policy", {})),
            "job_id": job.pk,
        }
        for job in finished[:limit]
        if job.finished_at is not None and job.started_at is not None
    ]


def policy_label(spec: dict[str, Any]) -> str:
    kind = str(spec.get("kind", "?"))
    detail = spec.get("endpoint") or spec.get("checkpoint") or spec.get("model_path") or ""
    return f"{kind} · {detail}" if detail else kind


def evaluation_baseline(job: Job) -> Baseline | None:
    """The rule-based inspector's stored old figures (``agent/data/real_baseline.json``), for a
    job that evaluated the rule-based inspector; None for other policies or without the file."""
    from agent.policies.rule_based import POLICY_KIND
    from agent.real_evaluation import load_baseline

    if (job.result or {}).get("policy", {}).get("kind") != POLICY_KIND:
        return None
    return load_baseline()


def evaluation_table(
    job: Job, baseline: Baseline | None = None, *, without_vetted: bool = False
) -> list[dict[str, Any]]:
    """One row per (task, part), real parts first, ready for a template (no floats to format);
    with ``baseline``, each row carries the old figures of its task and part as ``old``;
    ``without_vetted`` leaves the vetted part out (gold masking withholds it from the reader)."""
    result = job.result or {}
    rows = []
    for task, by_part in (result.get("tasks") or {}).items():
        for part in (*REAL_PARTS, VETTED_PART, SYNTHETIC_PART):
            figures = by_part.get(part)
            if figures is None or (without_vetted and part == VETTED_PART):
                continue
            rows.append(
                {
                    "task": task,
                    "part": part,
                    "part_label": PART_LABELS.get(part, part),
                    "synthetic": part == SYNTHETIC_PART,
                    **{
                        key: _shown(figures.get(key))
                        for key in ("accuracy", "balanced_accuracy", "f1", "ece")
                    },
                    "n": figures.get("n", 0),
                    "positives": figures.get("positives", 0),
                    "confident_wrong": figures.get("confident_wrong", 0),
                    "triage": [
                        {"deferral": f"{round(100 * deferral)} %", "f1": _shown(f1)}
                        for deferral, f1 in figures.get("triage", [])
                    ],
                    "old": _old_figures(baseline, task, part),
                    # the same figures as numbers (None: undefined), for the API
                    "values": {
                        key: figures.get(key)
                        for key in ("accuracy", "balanced_accuracy", "f1", "ece")
                    },
                    "triage_values": [[deferral, f1] for deferral, f1 in figures.get("triage", [])],
                }
            )
    return rows


def _old_figures(baseline: Baseline | None, task: str, part: str) -> dict[str, Any] | None:
    old = baseline.part(task, part) if baseline is not None else None
    if old is None:
        return None
    return {
        **{key: _shown(old.get(key)) for key in ("balanced_accuracy", "f1", "ece")},
        "confident_wrong": old.get("confident_wrong", 0),
    }


def _shown(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


def evaluation_overview(*, user: Any, job_id: int | None = None) -> dict[str, Any]:
    """What the evaluations page and its API twin show ``user``: the last 20 evaluation jobs,
    the one asked for (``job_id``, else the latest finished) with its table, and each model's
    stored verdicts on the vetted spectra. One read for both, so they list the same rows: the
    vetted part of a job is withheld from a reader with a gold item waiting
    (``blinding.evaluation_vetted_withheld``), and the per-model figures count only the
    catalog entries the reader may read (``selectors.vetted_figures_by_model``)."""
    from annotation import blinding
    from annotation.inspections.selectors import vetted_figures_by_model

    jobs = evaluation_jobs()
    shown = jobs.filter(pk=job_id).first() if job_id is not None else None
    shown = shown or latest_finished(jobs)
    result = (shown.result or {}) if shown else {}
    baseline = evaluation_baseline(shown) if shown else None
    withheld = shown is not None and blinding.evaluation_vetted_withheld(user=user, job=shown)
    return {
        "jobs": jobs[:20],
        "shown": shown,
        "shown_policy": policy_label(result.get("policy", {})) if shown else "",
        "rows": evaluation_table(shown, baseline, without_vetted=withheld) if shown else [],
        "vetted_withheld": withheld,
        "baseline": baseline,
        "missing_parts": result.get("missing_parts", []),
        "durations": recent_durations(jobs),
        "vetted_rows": vetted_figures_by_model(user=user),
    }
