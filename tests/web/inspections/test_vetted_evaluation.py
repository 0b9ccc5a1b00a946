"""The vetted part of the evaluation page: spectra the team labelled by vetting, scored by a
policy run afresh (an evaluation job) and by each model's stored verdicts (per task, per model)."""

from __future__ import annotations

import pytest
from django.urls import reverse

from agent import real_evaluation as real_bench
from agent.real_corpus import CorpusUnavailable
from agent.real_evaluation import part_report
from annotation.core.models import JobState
from annotation.inspections import evaluations, selectors, services
from tests.factories import UserFactory, make_inspected, make_spectrum

pytestmark = pytest.mark.django_db


@pytest.fixture
def spectra(db):
    # Different line strengths, so the inspector's answers differ between spectra.
    return [
        make_spectrum(object_id=f"VT-{i}", seed=i, line_amplitude=0.05 + 0.9 * (i % 2))
        for i in range(4)
    ]


TRUTH = ["NO", "YES", "YES", "NO"]


@pytest.fixture
def labelled(spectra, owner, expert, outsider):
    """Labels TRUTH[i] on spectra[i] (CV), from two agreeing experts on a run of model A."""
    run = make_inspected(
        spectra=spectra,
        verdicts={row.pk: ("YES", 0.6) for row in spectra},
        created_by=owner,
        model=("model:a", "A"),
    )
    for row, truth in zip(spectra, TRUTH, strict=True):
        candidate = run.candidates.get(spectrum=row)
        for user in (expert, outsider):
            services.expert_decision_record(candidate=candidate, expert=user, decision=truth)
    return run


def test_it_gives_each_vetted_sample_its_own_spectrum_and_label(labelled, spectra):
    samples = evaluations.vetted_samples(["CV"], 10)
    by_object = {s.spectrum.object_id: (s.label, s.sample_id) for s in samples}
    assert by_object == {
        row.object_id: (truth, f"vetted-{row.pk}-CV")
        for row, truth in zip(spectra, TRUTH, strict=True)
    }
    assert len(evaluations.vetted_samples(["CV"], 2)) == 2
    assert evaluations.vetted_samples(["MG"], 10) == []


def test_it_scores_a_policy_on_the_vetted_part_as_an_in_process_evaluation_does(
    labelled, owner, monkeypatch, django_capture_on_commit_callbacks
):
    from agent.evaluation import evaluate
    from agent.policies import build_policy

    def unavailable(split, tasks):
        raise CorpusUnavailable("not built in this test")

    monkeypatch.setattr(real_bench, "real_eval_samples", unavailable)
    with django_capture_on_commit_callbacks(execute=True):
        job = evaluations.evaluation_start(
            policy_spec={"kind": "rule-based"},
            tasks=["CV"],
            synthetic_per_task=0,
            vetted_per_task=10,
            max_tool_calls=8,
            actor=owner,
        )
    job.refresh_from_db()
    assert job.state == JobState.SUCCEEDED, job.error
    assert job.result["parts"] == ["vetted"]
    reference = evaluate(
        evaluations.vetted_samples(["CV"], 10),
        build_policy({"kind": "rule-based"}),
        benchmark="specvet-vetted",
        split="vetted",
        max_tool_calls=8,
    ).samples
    expected = part_report(
        [r.label for r in reference],
        [r.prediction for r in reference],
        [r.confidence for r in reference],
    )
    stored = job.result["tasks"]["CV"]["vetted"]
    assert stored["n"] == expected.n == 4 and stored["positives"] == 2
    assert stored["accuracy"] == round(expected.accuracy, 4)
    assert stored["balanced_accuracy"] == round(expected.balanced_accuracy, 4)
    rows = evaluations.evaluation_table(job)
    assert [(row["part"], row["part_label"]) for row in rows] == [
        ("vetted", "real, vetted by the team (expert labels)")
    ]


def test_it_scores_each_models_stored_verdicts_against_the_labels_per_task(
    labelled, spectra, owner
):
    # Model B answers TRUTH except on spectra[0]; model A said YES everywhere.
    answers = {row.pk: (truth, 0.95) for row, truth in zip(spectra, TRUTH, strict=True)}
    answers[spectra[0].pk] = ("YES", 0.95)
    make_inspected(spectra=spectra, verdicts=answers, created_by=owner, model=("model:b", "B"))
    table = {row["model_key"]: row for row in selectors.vetted_figures_by_model(user=owner)}
    assert set(table) == {"model:a", "model:b"}
    assert (table["model:a"]["n"], table["model:a"]["accuracy"]) == (4, "0.50")
    assert (table["model:b"]["n"], table["model:b"]["accuracy"]) == (4, "0.75")
    assert table["model:b"]["confident_wrong"] == 1
    assert table["model:a"]["balanced_accuracy"] == "0.50"


def test_it_shows_the_vetted_part_on_the_evaluation_page_and_hides_it_from_a_confined_rater(
    labelled, client, owner
):
    client.force_login(owner)
    page = client.get(reverse("evaluation_list")).content.decode()
    assert 'id="vetted-table"' in page and "model:a" in page
    rater = UserFactory(username="confined", roles=["rater"])
    assert selectors.vetted_figures_by_model(user=rater) == []


def _evaluated(owner, monkeypatch, capture):
    def unavailable(split, tasks):
        raise CorpusUnavailable("not built in this test")

    monkeypatch.setattr(real_bench, "real_eval_samples", unavailable)
    with capture(execute=True):
        job = evaluations.evaluation_start(
            policy_spec={"kind": "rule-based"},
            tasks=["CV"],
            synthetic_per_task=0,
            vetted_per_task=10,
            max_tool_calls=8,
            actor=owner,
        )
    job.refresh_from_db()
    assert job.state == JobState.SUCCEEDED, job.error
    return job


def test_it_withholds_the_vetted_part_from_a_vetter_whose_gold_item_it_scored(
    labelled, spectra, owner, staff, monkeypatch, django_capture_on_commit_callbacks
):
    """A vetter with a gold item waiting would read its answer off the figures (n, positives):
    the evaluation page leaves the vetted part out for them, and the job pages and APIs, which
    show the whole result, answer 404 as for any job hidden from them."""
    from django.test import Client

    from annotation.learning import services as learning_services

    job = _evaluated(owner, monkeypatch, django_capture_on_commit_callbacks)
    assert sorted(job.result["vetted_spectra"]) == sorted([row.pk, "CV"] for row in spectra)
    gold = learning_services.gold_item_mark(
        candidate=labelled.candidates.get(spectrum=spectra[1]), actor=staff
    )
    vetter = UserFactory(username="gold-vetter", roles=["expert", "ml_engineer"])
    seen = {}
    for name, user in (("vetter", vetter), ("owner", owner)):
        client = Client()
        client.force_login(user)
        page = client.get(reverse("evaluation_list"))
        seen[name] = (
            [row["part"] for row in page.context["rows"]],
            'id="vetted-withheld"' in page.content.decode(),
            client.get(reverse("api_job_detail", args=[job.pk])).status_code,
            client.get(reverse("job_detail", args=[job.pk])).status_code,
            [row["id"] for row in client.get(reverse("api_job_list")).json()["results"]],
        )
    assert seen["vetter"] == ([], True, 404, 404, [])
    assert seen["owner"] == (["vetted"], False, 200, 200, [job.pk])
    # Once they answer the gold item, they read the figures too.
    learning_services.gold_answer_record(gold=gold, vetter=vetter, answer="YES")
    client = Client()
    client.force_login(vetter)
    assert client.get(reverse("api_job_detail", args=[job.pk])).status_code == 200
    page = client.get(reverse("evaluation_list"))
    assert [row["part"] for row in page.context["rows"]] == ["vetted"]


# --- a checkpoint is never scored on spectra it trained on (issue 33 item 6) ---------------------


def _trained_on(folder, spectra):
    from agent.splits import SplitMembers, save_training_spectra
    from annotation.spectra.selectors import spectrum_value

    folder.mkdir(exist_ok=True)
    values = [spectrum_value(row) for row in spectra]
    save_training_spectra(folder, SplitMembers.of_spectra("SFT data", values))
    return {"kind": "transformers", "model_path": str(folder)}


def test_it_refuses_to_start_an_evaluation_on_vetted_spectra_the_checkpoint_trained_on(
    labelled, spectra, owner, settings, tmp_path
):
    from annotation.core.errors import WorkflowError
    from annotation.core.models import Job

    settings.POLICY_CHECKPOINT_ROOTS = [str(tmp_path)]
    spec = _trained_on(tmp_path / "sft", spectra[2:3])
    with pytest.raises(WorkflowError) as refusal:
        evaluations.evaluation_start(
            policy_spec=spec,
            tasks=["CV"],
            synthetic_per_task=0,
            vetted_per_task=10,
            max_tool_calls=8,
            actor=owner,
        )
    message = str(refusal.value)
    assert "checkpoint sft and the vetted evaluation part share" in message
    assert spectra[2].object_id in message and spectra[0].object_id not in message
    assert not Job.objects.filter(kind=evaluations.JOB_KIND).exists()
    # Spectra it did not train on: the same checkpoint may be evaluated.
    spec = _trained_on(tmp_path / "other", [])
    job = evaluations.evaluation_start(
        policy_spec=spec,
        tasks=["CV"],
        synthetic_per_task=0,
        vetted_per_task=10,
        max_tool_calls=8,
        actor=owner,
    )
    assert job.params["policy"]["model_path"] == spec["model_path"]


def test_it_fails_an_evaluation_job_whose_synthetic_part_the_checkpoint_trained_on(
    owner, settings, tmp_path, monkeypatch, django_capture_on_commit_callbacks
):
    """The runner checks every part (real, vetted, synthetic) against the checkpoint's training
    spectra, on the worker that has the folder, before any policy is loaded."""
    from agent.evaluation import specvi_mini_samples
    from agent.splits import SplitMembers, save_training_spectra

    def unavailable(split, tasks):
        raise CorpusUnavailable("not built in this test")

    monkeypatch.setattr(real_bench, "real_eval_samples", unavailable)
    settings.POLICY_CHECKPOINT_ROOTS = [str(tmp_path)]
    test_spectrum = next(s for s in specvi_mini_samples(split="test", tasks=["CV"])).spectrum
    spec = {"kind": "transformers", "model_path": str(tmp_path)}
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        job = evaluations.evaluation_start(
            policy_spec=spec,
            tasks=["CV"],
            synthetic_per_task=1,
            vetted_per_task=0,
            max_tool_calls=8,
            actor=owner,
        )
    save_training_spectra(tmp_path, SplitMembers.of_spectra("GRPO data", [test_spectrum]))
    for callback in callbacks:
        callback()
    job.refresh_from_db()
    assert job.state == JobState.FAILED
    assert f"checkpoint {tmp_path.name} and the synthetic evaluation part share" in job.error
    assert "not trained on" in job.error


@pytest.mark.parametrize("part, refused", [("development", False), ("validation", True)])
def test_it_scores_a_checkpoint_on_development_spectra_it_trained_on_but_not_validation(
    part, refused, owner, settings, tmp_path, monkeypatch, django_capture_on_commit_callbacks
):
    """Development is shown as "tuned on"; the held-out parts are refused."""
    from agent.evaluation import specvi_mini_samples
    from agent.policies import build_policy
    from agent.splits import SplitMembers, save_training_spectra
    from annotation.inspections import run_policies

    sample = specvi_mini_samples(split="test", tasks=["CV"])[0]

    def corpus(split, tasks):
        if split != part:
            raise CorpusUnavailable("only one part in this test")
        return [sample]

    monkeypatch.setattr(real_bench, "real_eval_samples", corpus)
    monkeypatch.setattr(
        run_policies, "policy_for", lambda spec: build_policy({"kind": "rule-based"})
    )
    settings.POLICY_CHECKPOINT_ROOTS = [str(tmp_path)]
    save_training_spectra(tmp_path, SplitMembers.of_spectra("SFT data", [sample.spectrum]))
    with django_capture_on_commit_callbacks(execute=True):
        job = evaluations.evaluation_start(
            policy_spec={"kind": "transformers", "model_path": str(tmp_path)},
            tasks=["CV"],
            synthetic_per_task=0,
            vetted_per_task=0,
            max_tool_calls=8,
            actor=owner,
        )
    job.refresh_from_db()
    if refused:
        assert job.state == JobState.FAILED
        assert f"and the {part} evaluation part share" in job.error
    else:
        assert job.state == JobState.SUCCEEDED, job.error
        assert job.result["parts"] == [part]
