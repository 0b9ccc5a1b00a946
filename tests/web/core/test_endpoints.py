"""Model endpoints: a key goes only to the endpoint that names it, and no user-supplied URL ever
reaches the server's HTTP client (issue 11, item 1).

Fake OpenAI-compatible servers on 127.0.0.1 record every request's path and Authorization
header; the hostile ones must record nothing at all.
"""

from __future__ import annotations

import importlib
import json
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from django.apps import apps as django_apps
from django.core.management.base import CommandError
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from annotation.core import endpoints
from annotation.core import errors as core_errors
from annotation.core import services as core_services
from annotation.core.models import AuditLog, Job, ModelEndpoint
from annotation.curation import jobs as curation_jobs
from annotation.inspections import jobs as inspections_jobs
from annotation.inspections import services as inspections_services
from annotation.inspections.models import InspectionRun
from annotation.rating import jobs as rating_jobs
from annotation.rating import services as rating_services
from annotation.rating.models import Judge
from tests.factories import (
    UserFactory,
    answer_turn,
    make_endpoint,
    make_spectrum,
    tool_call_turn,
)

pytestmark = pytest.mark.django_db

SERVER_KEY = "sk-server-OPENAI-key"
HELLO = [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]


@dataclass
class Recorder:
    """An OpenAI-compatible server playing the inspection script; remembers who called it how."""

    port: int = 0
    calls: list[dict[str, Any]] = field(default_factory=list)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def authorizations(self) -> set[str | None]:
        return {call["authorization"] for call in self.calls}

    def reply(self, body: dict[str, Any]) -> str:
        turn = sum(1 for message in body.get("messages", []) if message["role"] == "assistant")
        return tool_call_turn(6500, 6630, "H-alpha") if turn == 0 else answer_turn("YES")


def _serve() -> Iterator[Recorder]:
    recorder = Recorder()
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def _record(self) -> dict[str, Any]:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            with lock:
                recorder.calls.append(
                    {"path": self.path, "authorization": self.headers.get("Authorization")}
                )
            return body

        def do_POST(self) -> None:  # noqa: N802 (http.server naming)
            body = self._record()
            payload = json.dumps(
                {"choices": [{"message": {"role": "assistant", "content": recorder.reply(body)}}]}
            ).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def do_GET(self) -> None:  # noqa: N802
            self._record()
            self.send_response(404)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    recorder.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield recorder
    server.shutdown()
    server.server_close()


@pytest.fixture
def attacker() -> Iterator[Recorder]:
    yield from _serve()


@pytest.fixture
def server_a() -> Iterator[Recorder]:
    yield from _serve()


@pytest.fixture
def server_b() -> Iterator[Recorder]:
    yield from _serve()


@pytest.fixture
def keys(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", SERVER_KEY)
    monkeypatch.setenv("A_API_KEY", "sk-a")
    monkeypatch.setenv("B_API_KEY", "sk-b")


@pytest.fixture
def default_endpoint(settings, keys, server_a):
    settings.OPENAI_BASE_URL = server_a.base_url
    settings.OPENAI_MODEL = "spec-o3"
    return core_services.model_endpoint_sync_default()


@pytest.fixture
def ml(db):
    return UserFactory(username="mina", roles=["ml_engineer"])


def api(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def page(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def run_request(spectrum_id: int, policy: dict[str, Any]) -> dict[str, Any]:
    return {"task": "CV", "spectrum_ids": [spectrum_id], "policy": policy}


# --- the hostile request of the issue ----------------------------------------------------------


@pytest.mark.parametrize(
    "policy",
    [
        {"kind": "openai", "base_url": "ATTACKER", "model": "spec-o3"},
        {"kind": "openai", "endpoint": "default", "base_url": "ATTACKER"},
        {"kind": "openai", "endpoint": "default", "api_key": "sk-mine"},
        {"kind": "rule-based", "base_url": "ATTACKER"},
    ],
)
def test_it_refuses_a_user_supplied_url_and_calls_nobody(
    policy, cv, ml, attacker, server_a, default_endpoint, django_capture_on_commit_callbacks
):
    policy = {k: attacker.base_url if v == "ATTACKER" else v for k, v in policy.items()}
    with django_capture_on_commit_callbacks(execute=True):
        response = api(ml).post(
            reverse("api_run_create"), run_request(make_spectrum().pk, policy), format="json"
        )
    assert response.status_code == 400
    detail = response.json()["detail"]
    if policy["kind"] == "openai":
        refused = "base_url" if "base_url" in policy else "api_key"
        assert detail.startswith(f"{refused} is not accepted; choose a registered endpoint: ")
        assert "default (spec-o3)" in detail
    assert not InspectionRun.objects.exists()
    assert attacker.calls == [] and server_a.calls == []


@pytest.mark.parametrize(
    "sampling",
    [
        {"base_url": "ATTACKER"},
        {"api_key": "sk-mine"},
        {"extra_body": {"guided_json": {}}},
        {"temperature": -1},
        {"max_new_tokens": "many"},
    ],
)
def test_it_refuses_unknown_or_bad_sampling_at_creation(
    sampling, cv, ml, attacker, default_endpoint, django_capture_on_commit_callbacks
):
    """Such keys were stored, and then every candidate of the run failed on them."""
    sampling = {k: attacker.base_url if v == "ATTACKER" else v for k, v in sampling.items()}
    body = run_request(make_spectrum().pk, {"kind": "openai", "endpoint": "default"})
    with django_capture_on_commit_callbacks(execute=True):
        response = api(ml).post(
            reverse("api_run_create"), body | {"sampling": sampling}, format="json"
        )
    assert response.status_code == 400
    detail = response.json()["detail"]
    assert detail.startswith("sampling: ")
    assert "allowed keys: temperature, top_p, max_new_tokens, seed" in detail
    assert not InspectionRun.objects.exists()
    assert attacker.calls == []


def test_it_sends_a_form_run_to_the_chosen_endpoint_only_with_its_own_key(
    cv, ml, attacker, server_a, server_b, keys, django_capture_on_commit_callbacks
):
    make_endpoint(name="a", base_url=server_a.base_url, credential_env="A_API_KEY")
    make_spectrum(task=cv, label="YES")
    with django_capture_on_commit_callbacks(execute=True):
        response = page(ml).post(
            reverse("run_create"),
            {
                "task": "CV",
                "labelled_for_task": "on",
                "limit": "1",
                "policy": "openai",
                "endpoint": "a",
                "base_url": attacker.base_url,  # not a field of the form: ignored
                "temperature": "0",
                "rollouts": "1",
                "max_tool_calls": "2",
                "confidence_threshold": "0.5",
            },
        )
    assert response.status_code == 302
    run = InspectionRun.objects.get()
    assert run.endpoint.name == "a"
    assert run.policy_spec == {"kind": "openai", "endpoint": "a", "model": "m"}
    assert run.candidates.get().state == "done"
    assert len(server_a.calls) == 2 and server_a.authorizations == {"Bearer sk-a"}
    assert attacker.calls == [] and server_b.calls == []


def test_it_sends_each_endpoint_its_own_key_and_never_the_servers(
    cv, ml, server_a, server_b, keys, django_capture_on_commit_callbacks
):
    make_endpoint(name="a", base_url=server_a.base_url, credential_env="A_API_KEY")
    b = make_endpoint(name="b", base_url=server_b.base_url, model="mb", credential_env="B_API_KEY")
    spectrum = make_spectrum()
    for chosen in ("a", b.pk):  # by name or by id
        with django_capture_on_commit_callbacks(execute=True):
            response = api(ml).post(
                reverse("api_run_create"),
                run_request(spectrum.pk, {"kind": "openai", "endpoint": chosen}),
                format="json",
            )
        assert response.status_code == 201, response.content
    assert InspectionRun.objects.get(endpoint=b).policy_spec["endpoint"] == "b"
    assert server_a.authorizations == {"Bearer sk-a"} and len(server_a.calls) == 2
    assert server_b.authorizations == {"Bearer sk-b"} and len(server_b.calls) == 2
    assert {run.policy_info["base_url"] for run in InspectionRun.objects.all()} == {
        server_a.base_url,
        server_b.base_url,
    }


def test_it_sends_no_key_to_an_endpoint_without_a_credential(
    cv, ml, server_a, keys, django_capture_on_commit_callbacks
):
    make_endpoint(name="open", base_url=server_a.base_url)
    with django_capture_on_commit_callbacks(execute=True):
        api(ml).post(
            reverse("api_run_create"),
            run_request(make_spectrum().pk, {"kind": "openai", "endpoint": "open"}),
            format="json",
        )
    assert server_a.authorizations == {None}


def test_it_reads_a_key_from_a_secret_file_inside_the_secret_folders(
    settings, tmp_path, server_a, staff
):
    settings.MODEL_ENDPOINT_SECRET_DIRS = [str(tmp_path)]
    secret = tmp_path / "gpu.key"
    secret.write_text("sk-from-file\n")
    endpoint = core_services.model_endpoint_create(
        actor=staff,
        name="filed",
        base_url=server_a.base_url,
        model="m",
        credential_file=str(secret),
    )
    endpoints.endpoint_policy(endpoint).generate(HELLO)
    assert server_a.authorizations == {"Bearer sk-from-file"}


def test_it_refuses_a_model_the_endpoint_does_not_serve(cv, ml, server_a):
    make_endpoint(name="a", base_url=server_a.base_url, model="m")
    response = api(ml).post(
        reverse("api_run_create"),
        run_request(make_spectrum().pk, {"kind": "openai", "endpoint": "a", "model": "gpt-9"}),
        format="json",
    )
    assert response.status_code == 400
    assert "model 'gpt-9' is not served by endpoint 'a'" in response.json()["detail"]
    assert server_a.calls == []


def test_it_refuses_a_disabled_endpoint_when_a_run_starts(cv, ml, server_a):
    make_endpoint(name="off", base_url=server_a.base_url, enabled=False)
    response = api(ml).post(
        reverse("api_run_create"),
        run_request(make_spectrum().pk, {"kind": "openai", "endpoint": "off"}),
        format="json",
    )
    assert response.status_code == 400
    assert "model endpoint 'off' is disabled" in response.json()["detail"]
    assert not InspectionRun.objects.exists()


def test_it_stops_calling_an_endpoint_staff_disabled_after_the_run_started(
    cv, ml, staff, server_a, django_capture_on_commit_callbacks
):
    endpoint = make_endpoint(name="a", base_url=server_a.base_url)
    run = inspections_services.inspection_run_create(
        task=cv,
        spectrum_ids=[make_spectrum().pk],
        policy_spec={"kind": "openai", "endpoint": "a"},
        created_by=ml,
    )
    core_services.model_endpoint_update(endpoint=endpoint, actor=staff, enabled=False)
    candidate = run.candidates.get()
    inspections_services.candidate_claim(candidate_id=candidate.pk)
    inspections_jobs.run_candidate(candidate.pk)
    candidate.refresh_from_db()
    assert candidate.state == "failed"
    assert "model endpoint 'a' is disabled" in candidate.error
    assert server_a.calls == []


def test_it_refuses_an_endpoint_to_a_user_without_an_inspecting_role(cv, viewer, server_a):
    make_endpoint(name="a", base_url=server_a.base_url)
    with pytest.raises(core_errors.NotAllowed):
        inspections_services.inspection_run_create(
            task=cv,
            spectrum_ids=[make_spectrum().pk],
            policy_spec={"kind": "openai", "endpoint": "a"},
            created_by=viewer,
        )


# --- drafts, the standardizer, judges and the evaluate command ---------------------------------


def test_it_drafts_with_an_endpoint_teacher_and_its_own_key(
    cv, ml, server_a, attacker, keys, django_capture_on_commit_callbacks
):
    make_endpoint(name="a", base_url=server_a.base_url, credential_env="A_API_KEY")
    make_spectrum(task=cv, label="YES")
    refused = api(ml).post(
        reverse("api_curation_drafts"),
        {"task": "CV", "teacher": attacker.base_url},
        format="json",
    )
    assert refused.status_code == 404  # names no teacher (issue 32: a reference to nothing)
    assert "a URL is not accepted" in refused.json()["detail"]
    with django_capture_on_commit_callbacks(execute=True):
        response = api(ml).post(
            reverse("api_curation_drafts"),
            {"task": "CV", "teacher": "a", "max_tool_calls": 2},
            format="json",
        )
    assert response.status_code == 201, response.content
    job = Job.objects.get(kind="draft")
    assert job.params["teacher"] == {"kind": "openai", "endpoint": "a"}
    assert job.state == "succeeded", job.error
    assert server_a.authorizations == {"Bearer sk-a"} and attacker.calls == []


def test_it_never_reads_a_url_from_a_draft_jobs_teacher(cv, ml, server_a, attacker, keys):
    make_endpoint(name="a", base_url=server_a.base_url, credential_env="A_API_KEY")
    policy = curation_jobs.teacher_policy(
        {"kind": "openai", "endpoint": "a", "base_url": attacker.base_url, "api_key": "x"}
    )
    policy.generate(HELLO)
    assert server_a.authorizations == {"Bearer sk-a"} and attacker.calls == []


def test_it_standardizes_with_the_default_endpoint_only_while_enabled(
    staff, default_endpoint, server_a
):
    assert curation_jobs.standardizer_policy({}).base_url == server_a.base_url
    core_services.model_endpoint_update(endpoint=default_endpoint, actor=staff, enabled=False)
    assert curation_jobs.standardizer_policy({}) is None
    assert curation_jobs.standardizer_policy({"use_llm": False}) is None


def test_it_sends_a_judge_to_its_endpoint_with_that_endpoints_key(staff, server_a, server_b, keys):
    endpoint = make_endpoint(name="b", base_url=server_b.base_url, credential_env="B_API_KEY")
    judge = rating_services.judge_create(name="gpt", endpoint=endpoint, actor=staff)
    assert (judge.base_url, judge.model) == (server_b.base_url, "m")  # provenance snapshot
    rating_jobs.judge_policy(judge).generate(HELLO)
    assert server_b.authorizations == {"Bearer sk-b"} and server_a.calls == []


def test_it_refuses_a_judge_with_a_url(staff, attacker, default_endpoint):
    response = api(staff).post(
        reverse("api_rating_judge_create"),
        {"name": "evil", "endpoint": "default", "base_url": attacker.base_url},
        format="json",
    )
    assert response.status_code == 400
    assert response.json()["base_url"][0].startswith(
        "base_url is not accepted; choose a registered endpoint: default (spec-o3)"
    )
    assert not Judge.objects.exists() and attacker.calls == []


def test_it_refuses_a_judge_on_a_disabled_endpoint(staff, server_a):
    endpoint = make_endpoint(name="off", base_url=server_a.base_url, enabled=False)
    with pytest.raises(core_errors.WorkflowError, match="model endpoint 'off' is disabled"):
        rating_services.judge_create(name="gpt", endpoint=endpoint, actor=staff)


def test_it_evaluates_an_endpoint_named_on_the_command_line(server_a, keys):
    from annotation.management.commands.evaluate import _policy

    make_endpoint(name="a", base_url=server_a.base_url, credential_env="A_API_KEY")
    policy = _policy({"policy": "openai", "endpoint": "a", "checkpoint": None})
    policy.generate(HELLO)
    assert server_a.authorizations == {"Bearer sk-a"}
    with pytest.raises(CommandError, match="no model endpoint 'nope' is registered"):
        _policy({"policy": "openai", "endpoint": "nope", "checkpoint": None})


# --- who registers endpoints -------------------------------------------------------------------

NEW_ENDPOINT = {
    "name": "gpu-2",
    "base_url": "http://gpu-2:8000/v1",
    "model": "qwen",
    "credential_env": "GPU2_API_KEY",
    "timeout": "30",
    "enabled": "on",
}


@pytest.mark.parametrize("role", ["ml_engineer", "expert", "viewer", "rater"])
def test_it_refuses_endpoint_registration_to_non_staff(role):
    user = UserFactory(username=f"u-{role}", roles=[role])
    endpoint = make_endpoint(name="a")
    assert page(user).get(reverse("endpoint_list")).status_code == 403
    assert page(user).post(reverse("endpoint_create"), NEW_ENDPOINT).status_code == 403
    assert page(user).post(reverse("endpoint_toggle", args=[endpoint.pk])).status_code == 403
    create = api(user).post(reverse("api_endpoint_create"), NEW_ENDPOINT, format="json")
    assert create.status_code == 403
    update = api(user).post(
        reverse("api_endpoint_update", args=[endpoint.pk]),
        {"base_url": "http://evil:1/v1"},
        format="json",
    )
    assert update.status_code == 403
    endpoint.refresh_from_db()
    assert ModelEndpoint.objects.count() == 1 and endpoint.base_url == "http://127.0.0.1:9/v1"
    with pytest.raises(core_errors.NotAllowed):
        core_services.model_endpoint_create(actor=user, name="x", base_url="http://x/v1", model="m")


def test_it_lists_only_names_and_models_to_non_staff(ml, staff):
    make_endpoint(name="a", credential_env="A_API_KEY")
    make_endpoint(name="off", enabled=False)
    rows = api(ml).get(reverse("api_endpoint_list")).json()
    assert rows == [{"id": rows[0]["id"], "name": "a", "model": "m", "enabled": True}]
    full = api(staff).get(reverse("api_endpoint_list")).json()
    assert [(row["name"], row["credential_env"]) for row in full] == [
        ("a", "A_API_KEY"),
        ("off", ""),
    ]


def test_it_lets_staff_register_change_and_disable_an_endpoint_with_an_audit_trail(
    staff, monkeypatch
):
    monkeypatch.setenv("GPU2_API_KEY", "sk-gpu2-secret")
    client = page(staff)
    assert client.get(reverse("endpoint_create")).status_code == 200
    assert client.post(reverse("endpoint_create"), NEW_ENDPOINT).status_code == 302
    listing = client.get(reverse("endpoint_list")).content.decode()
    assert "<code>GPU2_API_KEY</code>" in listing and "http://gpu-2:8000/v1" in listing
    assert "sk-gpu2-secret" not in listing
    endpoint = ModelEndpoint.objects.get(name="gpu-2")
    assert (endpoint.credential_env, endpoint.timeout, endpoint.created_by) == (
        "GPU2_API_KEY",
        30.0,
        staff,
    )
    edited = {**NEW_ENDPOINT, "base_url": "http://gpu-3:8000/v1/"}
    assert client.post(reverse("endpoint_edit", args=[endpoint.pk]), edited).status_code == 302
    toggled = client.post(reverse("endpoint_toggle", args=[endpoint.pk]), HTTP_HX_REQUEST="true")
    assert 'id="endpoint-' in toggled.content.decode() and "Enable" in toggled.content.decode()
    endpoint.refresh_from_db()
    assert (endpoint.base_url, endpoint.enabled) == ("http://gpu-3:8000/v1", False)
    log = AuditLog.objects.filter(object_type="ModelEndpoint", object_pk=str(endpoint.pk))
    assert [(e.action, e.actor) for e in log] == [
        ("endpoint_created", staff),
        ("endpoint_changed", staff),
        ("endpoint_disabled", staff),
    ]
    assert log[1].data["changes"] == {"base_url": ["http://gpu-2:8000/v1", "http://gpu-3:8000/v1"]}


def test_it_registers_an_endpoint_through_the_api(staff):
    response = api(staff).post(
        reverse("api_endpoint_create"), {**NEW_ENDPOINT, "enabled": True}, format="json"
    )
    assert response.status_code == 201, response.content
    assert response.json()["credential_kind"] == "env"
    endpoint_id = response.json()["id"]
    update = api(staff).post(
        reverse("api_endpoint_update", args=[endpoint_id]), {"enabled": False}, format="json"
    )
    assert update.json()["enabled"] is False
    assert AuditLog.objects.filter(action="endpoint_disabled").count() == 1


@pytest.mark.parametrize(
    ("values", "reason"),
    [
        ({"credential_env": "SECRET_KEY"}, "must be upper-case and end in _API_KEY"),
        ({"credential_env": "DATABASE_URL"}, "must be upper-case and end in _API_KEY"),
        ({"credential_file": "/etc/passwd"}, "must be an absolute path inside a secret folder"),
        ({"base_url": "file:///etc/passwd"}, "must be http:// or https:// with a host name"),
        ({"base_url": "http://user:pw@gpu/v1"}, "must not hold a user name or password"),
        ({"name": "default"}, "registered from the OPENAI_* settings"),
        ({"name": "rule-based"}, "is reserved"),
    ],
)
def test_it_refuses_a_credential_or_url_that_could_leak_a_server_secret(staff, values, reason):
    arguments = {"name": "x", "base_url": "http://gpu:8000/v1", "model": "m", **values}
    with pytest.raises(core_errors.WorkflowError, match=re.escape(reason)):
        core_services.model_endpoint_create(actor=staff, **arguments)
    response = api(staff).post(reverse("api_endpoint_create"), arguments, format="json")
    assert response.status_code == 400 and reason in response.content.decode()
    assert not ModelEndpoint.objects.exists()


def test_it_refuses_a_key_typed_into_the_api(staff):
    response = api(staff).post(
        reverse("api_endpoint_create"), {**NEW_ENDPOINT, "api_key": "sk-live"}, format="json"
    )
    assert response.status_code == 400 and "stores no key" in response.content.decode()
    assert not ModelEndpoint.objects.exists()


def test_it_registers_and_changes_an_endpoint_in_the_admin_through_the_services(staff):
    client = page(staff)
    form = {**NEW_ENDPOINT, "timeout": "30"}
    response = client.post(reverse("admin:annotation_modelendpoint_add"), form)
    assert response.status_code == 302, response.content.decode()[:2000]
    endpoint = ModelEndpoint.objects.get(name="gpu-2")
    changed = {**form, "enabled": ""}
    url = reverse("admin:annotation_modelendpoint_change", args=[endpoint.pk])
    assert client.post(url, changed).status_code == 302
    endpoint.refresh_from_db()
    assert endpoint.enabled is False
    log = AuditLog.objects.filter(object_type="ModelEndpoint", object_pk=str(endpoint.pk))
    assert [(e.action, e.actor) for e in log] == [
        ("endpoint_created", staff),
        ("endpoint_disabled", staff),
    ]
    refused = client.post(
        reverse("admin:annotation_modelendpoint_add"),
        {**form, "name": "leak", "credential_env": "SECRET_KEY"},
    )
    assert "must be upper-case and end in _API_KEY" in refused.content.decode()
    assert not ModelEndpoint.objects.filter(name="leak").exists()


def test_it_keeps_the_admin_endpoints_from_non_staff(ml):
    assert page(ml).get(reverse("admin:annotation_modelendpoint_add")).status_code == 302


# --- the default endpoint from the settings ----------------------------------------------------


def test_it_registers_the_default_endpoint_from_the_settings_idempotently(settings, staff, keys):
    settings.OPENAI_BASE_URL = "http://gpu-1:8000/v1/"
    settings.OPENAI_MODEL = "spec-o3"
    endpoint = core_services.model_endpoint_sync_default()
    assert (endpoint.name, endpoint.base_url, endpoint.model, endpoint.credential_env) == (
        "default",
        "http://gpu-1:8000/v1",
        "spec-o3",
        "OPENAI_API_KEY",
    )
    assert endpoints.api_key(endpoint) == SERVER_KEY
    core_services.model_endpoint_sync_default()
    settings.OPENAI_MODEL = "spec-o3-v2"
    core_services.model_endpoint_sync_default()
    log = AuditLog.objects.filter(object_type="ModelEndpoint")
    assert [(e.action, e.actor) for e in log] == [
        ("endpoint_created", None),
        ("endpoint_changed", None),
    ]
    with pytest.raises(core_errors.WorkflowError, match="follows the OPENAI_\\* settings"):
        core_services.model_endpoint_update(endpoint=endpoint, actor=staff, base_url="http://e/v1")


def test_it_leaves_endpoints_alone_when_the_settings_name_none(settings):
    settings.OPENAI_BASE_URL = ""
    assert core_services.model_endpoint_sync_default() is None
    assert not ModelEndpoint.objects.exists()


# --- the data migration ------------------------------------------------------------------------


def test_it_migrates_old_runs_and_judges_to_endpoints(settings, cv):
    migration = importlib.import_module("annotation.migrations.0009_model_endpoints")
    settings.OPENAI_BASE_URL = "http://gpu-1:8000/v1"
    settings.OPENAI_MODEL = "spec-o3"
    ours = InspectionRun.objects.create(
        task=cv,
        policy_spec={"kind": "openai", "base_url": "http://gpu-1:8000/v1/", "model": "spec-o3"},
    )
    theirs = InspectionRun.objects.create(
        task=cv,
        policy_spec={"kind": "openai", "base_url": "http://evil.example:9/v1", "model": "x"},
    )
    rule = InspectionRun.objects.create(task=cv, policy_spec={"kind": "rule-based"})
    judge_ours = Judge.objects.create(name="j1", base_url="http://gpu-1:8000/v1", model="m")
    judge_theirs = Judge.objects.create(name="j2", base_url="http://evil.example:9/v1", model="x")

    migration.link_endpoints(django_apps, None)
    migration.link_endpoints(django_apps, None)  # a second pass changes nothing

    for row in (ours, theirs, rule, judge_ours, judge_theirs):
        row.refresh_from_db()
    default = ModelEndpoint.objects.get(name="default")
    legacy = ModelEndpoint.objects.get(name="evil.example-9")
    assert ModelEndpoint.objects.count() == 2
    assert (default.credential_env, default.enabled) == ("OPENAI_API_KEY", True)
    assert (legacy.base_url, legacy.model, legacy.enabled) == (
        "http://evil.example:9/v1",
        "x",
        False,
    )
    assert (legacy.credential_env, legacy.credential_file) == ("", "")
    assert (ours.endpoint, theirs.endpoint, rule.endpoint) == (default, legacy, None)
    assert ours.policy_spec == {"kind": "openai", "endpoint": "default", "model": "spec-o3"}
    assert theirs.policy_spec == {"kind": "openai", "endpoint": "evil.example-9", "model": "x"}
    assert (judge_ours.endpoint, judge_theirs.endpoint) == (default, legacy)
    assert AuditLog.objects.filter(action="endpoint_created").count() == 2
    with pytest.raises(endpoints.EndpointError, match="'evil.example-9' is disabled"):
        rating_jobs.judge_policy(judge_theirs)


def test_it_names_legacy_endpoints_after_their_host_without_clashes():
    migration = importlib.import_module("annotation.migrations.0009_model_endpoints")
    taken = {"gpu-1-8000"}
    assert migration.legacy_endpoint_name("http://GPU-1:8000/v1", taken) == "gpu-1-8000-2"
    assert migration.legacy_endpoint_name("https://api.example.com/v1", set()) == "api.example.com"
    assert migration.legacy_endpoint_name("http://default/v1", set()) == "default-2"


# --- an endpoint's address is for staff --------------------------------------------------------


def test_it_shows_a_runs_server_address_to_staff_only(cv, ml, staff, expert):
    from annotation.inspections import services as inspections_services

    run = inspections_services.inspection_run_create(
        task=cv,
        spectrum_ids=[make_spectrum().pk],
        policy_spec={"kind": "rule-based"},
        created_by=ml,
        enqueue=False,
    )
    internal = "http://gpu-internal-7:8000/v1"
    InspectionRun.objects.filter(pk=run.pk).update(
        policy_info={"policy": "openai", "base_url": internal, "model": "spec-o3"}
    )
    url = reverse("api_run_detail", args=[run.pk])
    for reader in (ml, expert):
        body = api(reader).get(url).json()
        assert body["policy_info"] == {"policy": "openai", "model": "spec-o3"}
        assert "gpu-internal-7" not in str(body)
        listed = api(reader).get(reverse("api_run_list")).json()["results"]
        assert "gpu-internal-7" not in str(listed)
    assert api(staff).get(url).json()["policy_info"]["base_url"] == internal
