"""A client generated from the served OpenAPI schema runs the main flows against a live server.

The schema is fetched from /api/schema/ and openapi-python-client (pinned in
requirements-dev.txt, the kept generator) writes a client package into a temporary folder, not
committed. The client is made to raise on any status the schema does not list, and every answer
is parsed into the schema's models: a list documented as an array but answered as a page, a
field documented as a string that comes back null, or an error body missing a documented field
breaks this test where it broke a real client. Flows: a token's status, list tasks and spectra,
create an inspection run, follow it to its candidates, read each, vet one as an expert; and a
viewer's refusal, parsed as the documented error body. And the closed loop by script (slow: it
trains the tiny model): vet, label, refit the calibration, export the labels, the revisions and
the preference pairs, train on the labels, inspect with the checkpoint, compare it with the
first model and promote it, refused to an expert and done by staff."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from rest_framework.authtoken.models import Token

from annotation.core.models import AuditLog
from annotation.inspections.models import Candidate, CatalogEntry
from annotation.spectra.models import Task
from tests.factories import UserFactory, make_revised_curation, make_spectrum

GENERATOR = Path(sys.executable).with_name("openapi-python-client")
PACKAGE = "specvet_client"


@pytest.fixture
def generated_client(live_server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The generated package, imported from tmp_path."""
    reader = UserFactory(username="schema-reader", roles=["viewer"])
    served = httpx.get(
        f"{live_server.url}/api/schema/?format=json",
        headers={"Authorization": f"Token {Token.objects.create(user=reader).key}"},
        timeout=60,
    )
    assert served.status_code == 200, served.text[:500]
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps(served.json()))
    config = tmp_path / "config.yaml"
    # No post hooks: formatting the generated code is not what is tested, and takes seconds.
    config.write_text(f"post_hooks: []\npackage_name_override: {PACKAGE}\n")
    generated = subprocess.run(
        [
            str(GENERATOR),
            "generate",
            "--path",
            str(schema),
            "--meta",
            "none",
            "--output-path",
            str(tmp_path / PACKAGE),
            "--config",
            str(config),
        ],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=tmp_path,
    )
    assert generated.returncode == 0, generated.stdout + generated.stderr
    # The generator warns about each schema part it could not turn into code: none may be left.
    assert "Warning" not in generated.stdout + generated.stderr, generated.stdout
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in [n for n in sys.modules if n == PACKAGE or n.startswith(f"{PACKAGE}.")]:
        del sys.modules[name]
    importlib.invalidate_caches()
    return importlib.import_module(PACKAGE)


def _api(module: str) -> Any:
    return importlib.import_module(f"{PACKAGE}.api.{module}")


def _models() -> Any:
    return importlib.import_module(f"{PACKAGE}.models")


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_it_runs_the_main_flows_through_a_client_generated_from_the_schema(
    live_server, generated_client
):
    models = _models()
    task = Task.objects.get(code="CV")
    spectra = [make_spectrum(object_id=f"CLIENT-{n}", seed=n, task=task) for n in range(2)]
    # One account that starts runs (ML engineer) and vets them (expert), with an issued token.
    user = UserFactory(username="client", roles=["ml_engineer", "expert"])
    client = generated_client.AuthenticatedClient(
        base_url=live_server.url,
        token=Token.objects.create(user=user).key,
        prefix="Token",
        raise_on_unexpected_status=True,
        timeout=httpx.Timeout(120),
    )

    # Closed before the live server stops: a keep-alive connection left open would end its
    # server thread after the test, on a database connection no longer shared with it.
    with client:
        token = _api("token.token_retrieve").sync(client=client)
        assert isinstance(token, models.ApiTokenDetailOutput)
        assert token.token is not None and not token.token.expired

        tasks = _api("tasks.tasks_list").sync(client=client)
        assert "CV" in {row.code for row in tasks}
        page = _api("spectra.spectra_list").sync(client=client)
        assert isinstance(page, models.PaginatedSpectrumOutputList)
        assert {row.object_id for row in page.results} == {"CLIENT-0", "CLIENT-1"}

        body = models.InspectionRunCreateInput(
            task="CV",
            spectrum_ids=[row.pk for row in spectra],
            policy=models.InspectionRunCreateInputPolicy.from_dict({"kind": "rule-based"}),
            name="through the generated client",
        )
        created = _api("inspections.inspections_create_create").sync(client=client, body=body)
        assert isinstance(created, models.RunOutput), created
        assert created.task == "CV" and created.name == "through the generated client"

        runs = _api("inspections.inspections_list").sync(client=client)
        assert [run.id for run in runs.results] == [created.id]

        deadline = time.monotonic() + 120
        while True:
            run = _api("inspections.inspections_retrieve").sync(run_id=created.id, client=client)
            assert isinstance(run, models.RunDetailOutput), run
            states = {row.state.value for row in run.candidates}
            if states <= {"done", "failed"} or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert states == {"done"}, run.candidates
        assert run.candidates_count == len(spectra) and run.progress is not None

        # Each candidate read through the client is the one of its own spectrum.
        for row in run.candidates:
            candidate = _api("inspections.inspections_candidates_retrieve").sync(
                candidate_id=row.id, client=client
            )
            assert isinstance(candidate, models.CandidateDetailOutput), candidate
            stored = Candidate.objects.get(pk=row.id)
            assert candidate.spectrum == stored.spectrum_id
            assert candidate.object_id == stored.spectrum.object_id
            assert candidate.verdict == stored.verdict
            assert [r.prediction for r in candidate.rollouts] == [
                r.prediction for r in stored.rollouts.order_by("index")
            ]

        chosen = Candidate.objects.filter(run_id=created.id).order_by("id").first()
        assert chosen is not None
        decision = _api("vetting.expert_decision_create").sync(
            client=client,
            body=models.ExpertDecisionCreateInput(
                candidate=chosen.pk, decision=models.ExpertDecisionEnum.YES, comment="looks right"
            ),
        )
        assert isinstance(decision, models.ExpertDecisionOutput), decision
        assert (decision.candidate, decision.expert) == (chosen.pk, "client")
        assert decision.decision == models.ExpertDecisionEnum.YES

        # A viewer's refusal comes back as the documented error body, with the reason.
        viewer = generated_client.AuthenticatedClient(
            base_url=live_server.url,
            token=Token.objects.create(user=UserFactory(username="low", roles=["viewer"])).key,
            prefix="Token",
            raise_on_unexpected_status=True,
        )
        with viewer:
            refused = _api("inspections.inspections_create_create").sync(client=viewer, body=body)
        assert isinstance(refused, models.ErrorOutput), refused
        assert "ml_engineer" in refused.detail


def _until(read: Any, done: Any, what: str, seconds: float = 300) -> Any:
    """``read()`` again until ``done(answer)``, for at most ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        answer = read()
        if done(answer):
            return answer
        assert time.monotonic() < deadline, f"{what}: not done in {seconds} s: {answer}"
        time.sleep(0.2)


def _inspected(client: Any, body: Any) -> Any:
    """Start an inspection run and follow it until every candidate is finished."""
    created = _api("inspections.inspections_create_create").sync(client=client, body=body)
    assert isinstance(created, _models().RunOutput), created
    return _until(
        lambda: _api("inspections.inspections_retrieve").sync(run_id=created.id, client=client),
        lambda run: {row.state.value for row in run.candidates} <= {"done", "failed"},
        f"run {created.id}",
    )


N_LOOP = 6


@pytest.mark.slow
@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_it_runs_the_loop_from_vetting_to_promotion_through_the_generated_client(
    live_server, generated_client, tiny_model_path, training_dirs, settings
):
    """vet -> label -> refit -> export -> train -> compare -> promote, every step a call of the
    client generated from the schema (issue 32, item 11): a team can drive the loop by script."""
    settings.POLICY_CHECKPOINT_ROOTS = [str(settings.TRAINING_OUTPUT_ROOT), str(tiny_model_path)]
    models = _models()
    # Half the spectra with a strong H-alpha line (YES), half without (NO).
    spectra = [
        make_spectrum(object_id=f"APILOOP-{i}", seed=i, line_amplitude=2.0 if i % 2 else 0.02)
        for i in range(N_LOOP)
    ]
    truth = {row.pk: "YES" if i % 2 else "NO" for i, row in enumerate(spectra)}
    # The loop's material besides the labels: an expert's audited revision of a draft.
    make_revised_curation(
        reviser=UserFactory(username="reviser", roles=["expert"]),
        auditors=[UserFactory(username="aud1"), UserFactory(username="aud2")],
        object_id="APILOOP-R",
    )

    def client_of(username: str, roles: list[str]) -> Any:
        user = UserFactory(username=username, roles=roles)
        return generated_client.AuthenticatedClient(
            base_url=live_server.url,
            token=Token.objects.create(user=user).key,
            prefix="Token",
            raise_on_unexpected_status=True,
            timeout=httpx.Timeout(300),
        )

    team = client_of("team", ["ml_engineer", "expert"])  # runs, vets, exports, trains
    second = client_of("second", ["expert"])
    staff = client_of("boss", ["staff"])
    with team, second, staff:
        # 1. A rule-based run; candidates under confidence 0.95 go to the experts.
        first = _inspected(
            team,
            models.InspectionRunCreateInput(
                task="CV",
                spectrum_ids=[row.pk for row in spectra],
                policy=models.InspectionRunCreateInputPolicy.from_dict({"kind": "rule-based"}),
                confidence_threshold=0.95,
            ),
        )
        assert {row.state.value for row in first.candidates} == {"done"}
        assert first.model_key.startswith("rule-based@")

        # 2. Vet: two experts agree on every candidate; each spectrum gets its label.
        for expert in (team, second):
            for row in first.candidates:
                candidate = _api("inspections.inspections_candidates_retrieve").sync(
                    candidate_id=row.id, client=expert
                )
                decision = _api("vetting.expert_decision_create").sync(
                    client=expert,
                    body=models.ExpertDecisionCreateInput(
                        candidate=row.id,
                        decision=models.ExpertDecisionEnum(truth[candidate.spectrum]),
                    ),
                )
                assert isinstance(decision, models.ExpertDecisionOutput), decision
        labelled = _api("catalog.catalog_list").sync(
            client=team,
            run=first.id,
            label_state=models.CatalogListLabelState("agreed"),
            page_size=100,
        )
        assert isinstance(labelled, models.CatalogListOutput), labelled
        assert labelled.count == N_LOOP
        assert {row.object_id: row.vetted_label for row in labelled.results} == {
            row.object_id: truth[row.pk] for row in spectra
        }

        # 3. Refit the model's calibration on the labels (a job).
        started = _api("calibration.calibration_refit").sync(
            client=team,
            body=models.CalibrationRefitInput(task="CV", model_key=first.model_key),
        )
        assert isinstance(started, models.JobStarted), started
        job = _until(
            lambda: _api("jobs.jobs_retrieve").sync(job_id=started.job, client=team),
            lambda job: job.state.value in {"succeeded", "failed"},
            "refit",
        )
        assert job.state.value == "succeeded", job
        calibration = _api("calibration.calibration_retrieve").sync(task_code="CV", client=team)
        (fitted,) = [m for m in calibration.models if m.model_key == first.model_key]
        assert fitted.fit is not None and fitted.fit.n_labels == N_LOOP

        # 4. Export: the vetted labels (GRPO rows), the revision (SFT rows) and the pair it
        # makes with its draft (DPO); each listed and downloaded.
        export = _api("labels.label_export_create").sync(
            client=team, body=models.LabelExportCreateInput(tasks=["CV"])
        )
        assert isinstance(export, models.LabelExportCreatedOutput), export
        assert export.new and export.manifest["rows"] == N_LOOP
        listed = _api("labels.label_exports_list").sync(client=team)
        assert [row.version for row in listed.results] == [export.version]
        download = _api("labels.label_export_download").sync_detailed(
            version=export.version, client=team
        )
        assert download.status_code == 200
        rows = [json.loads(line) for line in download.content.decode().splitlines()[1:]]
        assert {(row["object_id"], row["label"]) for row in rows} == {
            (row.object_id, truth[row.pk]) for row in spectra
        }
        for name, kind in (("revised", "revised"), ("preference", "preference")):
            made = _api(f"labels.{name}_export_create").sync(
                client=team, body=models.TaskFilterInput(task="CV")
            )
            assert isinstance(made, models.LoopExportCreatedOutput), made
            assert (made.kind, made.new, made.manifest["rows"]) == (kind, True, 1)
            listed = _api(f"labels.{name}_exports_list").sync(client=team)
            assert [row.version for row in listed.results] == [made.version]
            archive = _api(f"labels.{name}_export_download").sync_detailed(
                version=made.version, client=team
            )
            assert archive.status_code == 200 and archive.content[:2] == b"PK"

        # 5. Train: a tiny GRPO run on the label export; its checkpoint names the decisions.
        training = _api("training.training_create_create").sync(
            client=team,
            body=models.TrainingRunCreateInput(
                stage=models.StageEnum.GRPO,
                preset=models.PresetEnum.CPU_TINY,
                base_model=str(tiny_model_path),
                label_export=export.version,
                overrides=models.TrainingRunCreateInputOverrides.from_dict({"max_steps": 1}),
            ),
        )
        assert isinstance(training, models.TrainingRunOutput), training
        trained = _until(
            lambda: _api("training.training_retrieve").sync(run_id=training.id, client=team),
            lambda run: run.state in {"succeeded", "failed", "cancelled"},
            "training",
            seconds=600,
        )
        assert trained.state == "succeeded", trained.error
        checkpoint = trained.checkpoint
        learned = checkpoint.lineage["dataset"]["sources"]["label_export"]
        assert learned["decisions"] == export.manifest["decisions"]

        # 6. The checkpoint inspects the same spectra: its model is its weights' hash.
        second_run = _inspected(
            team,
            models.InspectionRunCreateInput(
                task="CV",
                spectrum_ids=[row.pk for row in spectra],
                policy=models.InspectionRunCreateInputPolicy.from_dict(
                    checkpoint.policy_spec.to_dict()
                ),
                sampling=models.InspectionRunCreateInputSampling.from_dict({"max_new_tokens": 24}),
                max_tool_calls=0,
                confidence_threshold=0.75,
            ),
        )
        assert {row.state.value for row in second_run.candidates} == {"done"}
        assert second_run.model_key.startswith("checkpoint:")

        # 7. Compare the two models with the labels as truth.
        compared = _api("catalog.model_comparison_retrieve").sync(
            client=team, task="CV", new=second_run.model_key, old=first.model_key
        )
        assert isinstance(compared, models.ModelComparisonOutput), compared
        comparison = compared.comparison
        assert comparison.shared == comparison.labelled == N_LOOP
        right = {
            run.id: sum(
                entry.verdict == truth[entry.candidate.spectrum_id]
                for entry in CatalogEntry.objects.filter(run_id=run.id).select_related("candidate")
            )
            for run in (first, second_run)
        }
        assert (comparison.old_correct, comparison.new_correct) == (
            right[first.id],
            right[second_run.id],
        )
        assert comparison.fixed - comparison.broken == right[second_run.id] - right[first.id]

        # 8. Promote: refused to an expert, done by staff and logged; the catalog's current
        # model is the checkpoint.
        body = models.ModelPromoteInput(
            task="CV", model_key=second_run.model_key, comment="by script"
        )
        refused = _api("catalog.model_promote").sync(client=second, body=body)
        assert isinstance(refused, models.ErrorOutput) and "staff" in refused.detail
        promoted = _api("catalog.model_promote").sync(client=staff, body=body)
        assert isinstance(promoted, models.ModelPromotionOutput), promoted
        assert (promoted.model_key, promoted.promoted_by) == (second_run.model_key, "boss")
        logged = AuditLog.objects.get(action="model_promoted")
        assert logged.actor.get_username() == "boss"
        assert logged.data["model_key"] == second_run.model_key
        current = _api("catalog.catalog_list").sync(client=team, model="current", page_size=100)
        assert {row.model_key for row in current.results} == {second_run.model_key}
        assert current.count == N_LOOP
