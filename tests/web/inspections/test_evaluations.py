"""Evaluations: a policy's figures on real spectra beside SpecVI-mini (issue 13, item 6)."""

from __future__ import annotations

import pytest
from django.urls import reverse

from agent import real_evaluation as real_bench
from agent.real_corpus import CorpusUnavailable, fetch
from annotation.core.errors import WorkflowError
from annotation.core.models import Job, JobState
from annotation.inspections import evaluations
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def real_corpus(monkeypatch) -> None:
    """The real parts, thinned to every positive and every 25th negative: whole episodes on all
    1,300 spectra are `real_bench`'s job, not a web test's."""
    try:
        fetch(quiet=True)
    except CorpusUnavailable as exc:
        pytest.skip(f"the real-data cache cannot be built here: {exc}")
    every = real_bench.real_eval_samples

    def thinned(part, tasks):
        samples = every(part, tasks)
        negatives = [s for s in samples if s.label == "NO"]
        return [s for s in samples if s.label == "YES"] + negatives[::25]

    monkeypatch.setattr(real_bench, "real_eval_samples", thinned)


@pytest.fixture
def engineer(db):
    return UserFactory(username="engineer", roles=["ml_engineer"])


def start(engineer, **overrides) -> Job:
    arguments = {
        "policy_spec": {"kind": "rule-based"},
        "tasks": ["MG"],
        "synthetic_per_task": 4,
        "max_tool_calls": 8,
        "actor": engineer,
    } | overrides
    return evaluations.evaluation_start(**arguments)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"tasks": []}, "at least one task"),
        ({"tasks": ["NOPE"]}, "NOPE"),
        ({"synthetic_per_task": 201}, "0-200"),
        ({"policy_spec": {"kind": "rule-based", "base_url": "http://evil"}}, "base_url"),
        ({"policy_spec": {"kind": "shell"}}, "policy kind"),
    ],
)
def test_it_refuses_an_evaluation_it_cannot_run(engineer, overrides, message) -> None:
    with pytest.raises(WorkflowError, match=message):
        start(engineer, **overrides)
    assert not Job.objects.filter(kind=evaluations.JOB_KIND).exists()


def test_it_scores_the_real_parts_beside_the_synthetic_one(
    engineer, real_corpus, django_capture_on_commit_callbacks
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        job = start(engineer)  # eager Celery in tests: done once committed
    job.refresh_from_db()
    assert job.state == JobState.SUCCEEDED, job.error
    result = job.result
    assert result["parts"] == ["development", "validation", "synthetic"]
    mg = result["tasks"]["MG"]
    assert mg["synthetic"]["n"] == 4
    assert mg["development"]["n"] > 20 and mg["development"]["positives"] >= 3
    assert 0.0 <= mg["validation"]["balanced_accuracy"] <= 1.0
    assert [deferral for deferral, _ in mg["validation"]["triage"]] == [0.0, 0.1, 0.2, 0.3]
    assert job.done == job.total == sum(part["n"] for part in mg.values())
    rows = evaluations.evaluation_table(job)
    assert [row["part"] for row in rows] == ["development", "validation", "synthetic"]
    assert [row["synthetic"] for row in rows] == [False, False, True]


def test_it_shows_the_latest_evaluation_to_a_viewer_without_the_start_form(
    engineer, real_corpus, client, django_capture_on_commit_callbacks
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        start(engineer)
    client.force_login(UserFactory(username="vera", roles=["viewer"]))
    page = client.get(reverse("evaluation_list")).content.decode()
    assert "real, validation (never tuned on)" in page
    assert "synthetic (SpecVI-mini test split)" in page
    assert page.index("real, development") < page.index("synthetic (SpecVI-mini")
    assert "Start evaluation" not in page


def test_it_starts_an_evaluation_from_the_form(engineer, client) -> None:
    client.force_login(engineer)
    response = client.post(
        reverse("evaluation_start"),
        {"policy": "rule-based", "tasks": ["CV"], "synthetic_per_task": "2", "max_tool_calls": "8"},
    )
    job = Job.objects.get(kind=evaluations.JOB_KIND)
    assert response.status_code == 302 and response["Location"] == reverse(
        "job_detail", args=[job.pk]
    )
    assert job.params["tasks"] == ["CV"] and job.created_by == engineer


def test_it_answers_a_bad_form_with_its_errors(engineer, client) -> None:
    client.force_login(engineer)
    response = client.post(
        reverse("evaluation_start"),
        {"policy": "openai", "tasks": ["CV"], "synthetic_per_task": "2", "max_tool_calls": "8"},
    )
    assert response.status_code == 400
    assert "choose one of the registered model endpoints" in response.content.decode()
    assert not Job.objects.filter(kind=evaluations.JOB_KIND).exists()


def test_it_promises_no_duration_it_has_not_measured(engineer, client) -> None:
    # Issue 26: the page promised "about half a minute" for a 69 s job.
    client.force_login(engineer)
    page = client.get(reverse("evaluation_list")).content.decode()
    assert "half a minute" not in page
    assert "no evaluation has finished here yet to measure one" in page


def test_it_states_how_long_the_last_evaluation_took(engineer, client) -> None:
    from datetime import timedelta

    from django.utils import timezone

    started = timezone.now() - timedelta(minutes=5)
    job = Job.objects.create(
        kind=evaluations.JOB_KIND,
        state=JobState.SUCCEEDED,
        params={},
        result={"policy": {"kind": "rule-based"}},
        started_at=started,
        finished_at=started + timedelta(seconds=69),
        created_by=engineer,
    )
    client.force_login(engineer)
    page = client.get(reverse("evaluation_list")).content.decode()
    assert f'The last evaluation here took 69 s (rule-based, <a href="/jobs/{job.pk}/">' in page


def finished_job(engineer, policy: dict) -> Job:
    figures = {
        "n": 649,
        "positives": 55,
        "accuracy": 0.97,
        "balanced_accuracy": 0.8745,
        "f1": 0.79,
        "ece": 0.02,
        "confident_wrong": 1,
        "triage": [[0.0, 0.79]],
    }
    return Job.objects.create(
        kind=evaluations.JOB_KIND,
        state=JobState.SUCCEEDED,
        params={},
        result={"policy": policy, "parts": ["validation"], "tasks": {"B": {"validation": figures}}},
        created_by=engineer,
    )


def test_it_shows_the_old_rule_based_figures_beside_the_new(engineer, client) -> None:
    """Issue 23: the page shows the stored baseline (the inspector version before the change,
    with its commit) beside a rule-based job's figures, per task and part."""
    baseline = real_bench.load_baseline()
    assert baseline is not None
    old = baseline.part("B", "validation")
    assert old is not None
    job = finished_job(engineer, {"kind": "rule-based"})
    rows = evaluations.evaluation_table(job, evaluations.evaluation_baseline(job))
    assert rows[0]["balanced_accuracy"] == "0.87"
    assert rows[0]["old"]["balanced_accuracy"] == f"{old['balanced_accuracy']:.2f}"
    assert rows[0]["old"]["confident_wrong"] == old["confident_wrong"]
    client.force_login(engineer)
    page = client.get(reverse("evaluation_list")).content.decode()
    assert "old balanced acc." in page
    assert f"<code>{baseline.code_commit}</code>" in page
    assert f'<td class="old-figure">{old["balanced_accuracy"]:.2f}</td>' in page


def test_it_shows_no_rule_based_baseline_beside_another_policy(engineer, client) -> None:
    job = finished_job(engineer, {"kind": "openai", "endpoint": "local"})
    assert evaluations.evaluation_baseline(job) is None
    assert evaluations.evaluation_table(job)[0]["old"] is None
    client.force_login(engineer)
    page = client.get(reverse("evaluation_list")).content.decode()
    assert "old balanced acc." not in page
