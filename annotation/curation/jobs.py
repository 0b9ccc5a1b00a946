"""Job runners of curation: LLM drafts and LLM standardization."""

from __future__ import annotations

import logging
from typing import Any

from agent.policies.base import EndpointUnavailable
from annotation.core import errors as core_errors
from annotation.core import services as core_services
from annotation.core.jobs import OutageWatch, runner
from annotation.core.models import Job
from annotation.curation import services

logger = logging.getLogger(__name__)


# --- drafts ------------------------------------------------------------------------------------


def teacher_policy(spec: dict[str, Any]) -> Any:
    """Build the teacher: a registered model endpoint (``{"kind": "openai", "endpoint": NAME}``,
    the "default" one when none is named) or the rule-based inspector.

    Only the endpoint's own URL and key are used; a URL or key in the spec is never read.
    """
    from agent.policies import build_policy
    from annotation.core import endpoints

    kind = spec.get("kind") or ("openai" if spec.get("endpoint") else "rule-based")
    if kind == "openai":
        endpoint = endpoints.find_usable(spec.get("endpoint") or endpoints.DEFAULT_ENDPOINT)
        return endpoints.endpoint_policy(endpoint, options=spec, sampling=spec.get("sampling"))
    return build_policy({**spec, "kind": kind})


@runner("draft")
def run_draft(job: Job) -> dict[str, Any]:
    """Draft one trajectory per selected spectrum with the teacher, giving it the true label.

    Idempotent: a spectrum already drafted by this job (a redelivered task) is skipped.
    """
    from agent.drafting import teacher_for
    from agent.rollout import inspect
    from annotation.curation.models import Curation
    from annotation.spectra.models import Spectrum, Task
    from annotation.spectra.selectors import spectrum_value, task_value

    params = job.params
    task_row = Task.objects.get(code=params["task"])
    task = task_value(task_row)
    policy = OutageWatch(teacher_policy(params.get("teacher", {})))
    spectrum_ids = list(params["spectrum_ids"])
    core_services.job_set_total(job_id=job.pk, total=len(spectrum_ids))
    failures: list[dict[str, Any]] = []
    created = 0
    for spectrum_id in spectrum_ids:
        if core_services.job_is_cancelled(job_id=job.pk):
            break
        if Curation.objects.filter(draft_job=job, spectrum_id=spectrum_id).exists():
            created += 1  # by an earlier attempt of this job
            core_services.job_progress(job_id=job.pk, done=1)
            continue
        row = Spectrum.objects.filter(pk=spectrum_id).first()
        reason = None
        if row is None:
            reason = "spectrum no longer exists"
        elif row.label not in ("YES", "NO"):
            reason = "spectrum has no YES/NO label for this task; the teacher needs the true label"
        if row is None or reason:
            failures.append({"spectrum_id": spectrum_id, "error": reason})
            core_services.job_progress(job_id=job.pk, failed=1)
            continue
        try:
            trajectory = inspect(
                spectrum_value(row),
                task,
                teacher_for(policy, row.label),
                max_tool_calls=int(params.get("max_tool_calls", 8)),
            )
            if trajectory.stop_reason == "policy_error":
                raise policy.outage or RuntimeError("; ".join(trajectory.errors))
            services.curation_create(
                spectrum=row,
                task=task_row,
                trajectory=trajectory,
                ground_truth=row.label,
                source="draft",
                draft_job=job,
                created_by=job.created_by,
            )
        except EndpointUnavailable:
            raise  # down for every spectrum alike: the job waits and resumes here
        except Exception as error:  # one bad spectrum must not sink the batch
            logger.warning("draft for spectrum %s failed: %s", spectrum_id, error)
            failures.append(
                {"spectrum_id": spectrum_id, "error": f"{type(error).__name__}: {error}"}
            )
            core_services.job_progress(job_id=job.pk, failed=1)
            continue
        created += 1
        core_services.job_progress(job_id=job.pk, done=1)
    if failures and not created:
        raise RuntimeError(
            f"no draft could be made; first failure: spectrum {failures[0]['spectrum_id']}: "
            f"{failures[0]['error']}"
        )
    return {"created": created, "failures": failures, "teacher": policy.info()}


# --- standardization ------------------------------------------------------------------------------

STANDARDIZE_INSTRUCTIONS = (
    "Rewrite this expert-approved spectral inspection trajectory into clean iMCoT form. For each "
    "turn keep the same meaning and the same tool call (same wavelength_range and label, "
    "unchanged); rewrite only the reasoning inside <think>...</think> and the justification "
    "after \\boxed{} into concise, physically precise prose. Reply with the turns separated by "
    "lines containing only '=== TURN ===', each turn in the exact format <think>...</think> "
    "<tool_call>{...}</tool_call>, and the last one <think>...</think> <answer>\\boxed{YES|NO} "
    "justification</answer>."
)


def standardize_with_llm(trajectory: Any, policy: Any) -> Any:
    """Ask an LLM to rewrite the reasoning; the caller checks tool actions are unchanged."""
    from dataclasses import replace

    from agent.editing import standardize
    from agent.trajectory import Step

    turns = "\n=== TURN ===\n".join(step.assistant_text for step in trajectory.steps)
    reply = policy.generate(
        [
            {"role": "system", "content": [{"type": "text", "text": STANDARDIZE_INSTRUCTIONS}]},
            {"role": "user", "content": [{"type": "text", "text": turns}]},
        ]
    )
    texts = [text.strip() for text in reply.split("=== TURN ===")]
    if len(texts) != len(trajectory.steps):
        raise ValueError(
            f"the standardizer returned {len(texts)} turns for {len(trajectory.steps)}"
        )
    steps = [
        Step.from_output(
            step.index,
            text,
            tool_result=step.tool_result,
            generate_s=step.generate_s,
            tool_s=step.tool_s,
        )
        for step, text in zip(trajectory.steps, texts, strict=True)
    ]
    rewritten = replace(trajectory, steps=steps)
    rewritten.finalize(trajectory.stop_reason)
    return standardize(rewritten)


def standardizer_policy(params: dict[str, Any]) -> Any:
    from annotation.core import endpoints
    from annotation.core.models import ModelEndpoint

    if not params.get("use_llm", True):
        return None
    if params.get("endpoint"):
        return endpoints.endpoint_policy(endpoints.find_usable(params["endpoint"]))
    default = ModelEndpoint.objects.filter(name=endpoints.DEFAULT_ENDPOINT, enabled=True).first()
    return endpoints.endpoint_policy(default) if default is not None else None


@runner("standardize")
def run_standardize(job: Job) -> dict[str, Any]:
    """Standardize approved trajectories: with the LLM of a model endpoint (``endpoint`` in the
    params, else "default" when it is registered and enabled), else with the normalizer."""
    from agent.editing import standardize
    from annotation.curation.models import Curation, CurationState

    ids = list(job.params["curation_ids"])
    core_services.job_set_total(job_id=job.pk, total=len(ids))
    policy = standardizer_policy(job.params)
    failures = []
    for curation_id in ids:
        curation = Curation.objects.get(pk=curation_id)
        if curation.state != CurationState.APPROVED:
            core_services.job_progress(job_id=job.pk, done=1)
            continue  # already standardized (a redelivered job) or moved on
        approved = services.trajectory_from_stored(
            curation.versions.get(number=curation.head_number).data
        )
        name = "normalizer"
        try:
            if policy is not None:
                try:
                    result = standardize_with_llm(approved, policy)
                    name = f"llm:{policy.info().get('model', '')}"
                    if not result.format_ok:
                        raise ValueError("; ".join(result.format_reasons))
                except Exception as error:  # fall back, and say so in the version comment
                    logger.warning("LLM standardization of %s failed: %s", curation_id, error)
                    result, name = standardize(approved), f"normalizer (LLM failed: {error})"
            else:
                result = standardize(approved)
            services.curation_standardize(
                curation=curation, trajectory=result, standardizer={"name": name}
            )
        except core_errors.WorkflowError as error:
            failures.append({"curation_id": curation_id, "error": str(error)})
            core_services.job_progress(job_id=job.pk, failed=1)
            continue
        core_services.job_progress(job_id=job.pk, done=1)
    return {"failures": failures}
