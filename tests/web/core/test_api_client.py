"""A client generated from the served OpenAPI schema runs the main flows against a live server.

The schema is fetched from /api/schema/ and openapi-python-client (pinned in
requirements-dev.txt, the kept generator) writes a client package into a temporary folder, not
committed. The client is made to raise on any status the schema does not list, and every answer
is parsed into the schema's models: a list documented as an array but answered as a page, a
field documented as a string that comes back null, or an error body missing a documented field
breaks this test where it broke a real client. Flows: a token's status, list tasks and spectra,
create an inspection run, follow it to its candidates, read each, vet one as an expert; and a
viewer's refusal, parsed as the documented error body."""

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

from annotation.inspections.models import Candidate
from annotation.spectra.models import Task
from tests.factories import UserFactory, make_spectrum

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
