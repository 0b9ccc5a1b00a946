"""An evaluation job stores the figures an in-process evaluation of the same samples gives, also
while an inspection batch shares the worker process's cached policy in another thread (issue 28:
the evaluation read its confidences from the shared policy's "last decision")."""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from agent import evaluation
from agent import real_evaluation as real_bench
from agent.policies.rule_based import RuleBasedInspector
from annotation.core import jobs as core_jobs
from annotation.core.models import Job
from annotation.inspections import evaluations, jobs, run_policies
from annotation.inspections import services as inspections_services
from tests.factories import make_spectrum

needs_postgres = pytest.mark.skipif(
    connection.vendor != "postgresql",
    reason="a worker thread needs a database it can share with the test (PostgreSQL)",
)


def reference_table(params: dict) -> dict:
    """The figures of an in-process evaluation of the job's own samples, with a fresh policy,
    rounded as the job stores them."""
    parts = evaluations._samples(params)
    results = {
        part: evaluation.evaluate(
            samples,
            RuleBasedInspector(),
            benchmark="specvi-mini",
            split="test",
            max_tool_calls=params["max_tool_calls"],
        ).samples
        for part, samples in parts.items()
        if samples
    }
    table = real_bench.side_by_side(results, params["tasks"])
    return {
        task: {part: (r.n, r.positives, evaluations._finite(r.balanced_accuracy),
                      evaluations._finite(r.ece), r.confident_wrong)
               for part, r in by_part.items()}
        for task, by_part in table.items()
    }  # fmt: skip


def stored_table(job: Job) -> dict:
    return {
        task: {
            part: (f["n"], f["positives"], f["balanced_accuracy"], f["ece"], f["confident_wrong"])
            for part, f in by_part.items()
        }
        for task, by_part in job.result["tasks"].items()
    }


@needs_postgres
@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_it_stores_an_evaluation_s_own_figures_beside_an_inspection_thread(
    cv, ml_engineer, monkeypatch
) -> None:
    monkeypatch.setattr(run_policies, "_policies", {})
    monkeypatch.setattr(real_bench, "real_eval_samples", lambda part, tasks: [])
    job = evaluations.evaluation_start(
        policy_spec={"kind": "rule-based"},
        tasks=["CV"],
        synthetic_per_task=24,
        max_tool_calls=8,
        actor=ml_engineer,
    )
    spectra = [make_spectrum(object_id=f"EVAL-{i}", seed=i) for i in range(24)]
    run = inspections_services.inspection_run_create(
        task=cv,
        spectrum_ids=[s.pk for s in spectra],
        policy_spec={"kind": "rule-based"},
        created_by=ml_engineer,
        enqueue=False,
    )
    ids = list(run.candidates.order_by("pk").values_list("pk", flat=True))
    errors: list[BaseException] = []

    def inspect_meanwhile() -> None:
        try:
            jobs.run_candidates(inspections_services.candidates_claim(candidate_ids=ids))
        except BaseException as error:
            errors.append(error)
        finally:
            connection.close()

    other = threading.Thread(target=inspect_meanwhile)
    other.start()
    Job.objects.filter(pk=job.pk).update(state="running")
    core_jobs.run(job.pk)
    other.join(timeout=300)
    assert not errors, errors
    job.refresh_from_db()
    assert job.state == "succeeded", job.error
    assert stored_table(job) == reference_table(job.params)
