"""Every page and API endpoint turns anonymous visitors away, except the login page.

The URL patterns are walked from the resolver, so a URL added later (training pages, say) is
checked without touching this file. Path parameters are filled with the ids of objects that
exist, so a view that forgot its check would answer with their data.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, reverse
from django.urls.converters import IntConverter

from annotation.core.permissions import REFUSAL
from tests.factories import UserFactory
from tests.web.security_world import World, world_rolled_back

pytestmark = pytest.mark.django_db

PUBLIC = {"login", "admin:login"}  # log-in pages; logging out needs no one to be logged in
LOGOUT = {"logout", "admin:logout"}


def url_patterns() -> list[tuple[str, list[str], bool]]:
    """(name, path parameters, whether they are integers) of every named pattern."""
    found = []

    def walk(resolver: URLResolver, namespace: str) -> Iterator[tuple[str, URLPattern]]:
        for entry in resolver.url_patterns:
            if isinstance(entry, URLResolver):
                inner = entry.namespace or ""
                yield from walk(entry, f"{namespace}{inner}:" if inner else namespace)
            elif entry.name:
                yield f"{namespace}{entry.name}", entry

    for name, pattern in walk(get_resolver(), ""):
        converters = getattr(pattern.pattern, "converters", {})
        params = list(converters) or list(pattern.pattern.regex.groupindex)
        integers = all(isinstance(converters.get(p), IntConverter) for p in params)
        found.append((name, params, integers and bool(params)))
    return sorted({(n, tuple(p), i) for n, p, i in found})  # type: ignore[misc]


PATTERNS = url_patterns()


@pytest.fixture(scope="module")
def world(django_db_setup, django_db_blocker, tmp_path_factory) -> Iterator[World]:
    with world_rolled_back(
        "plain text", django_db_blocker=django_db_blocker, tmp_path_factory=tmp_path_factory
    ) as built:
        yield built


def existing_values(world: World) -> dict[str, object]:
    """An existing object behind every path parameter the app's URLs use."""
    return {
        "spectrum_id": world.spectrum.pk,
        "content_hash": world.spectrum.content_hash,
        "curation_id": world.curation.pk,
        "number": world.curation.head_number,
        "sha256": world.image_sha,
        "job_id": world.job.pk,
        "export_id": world.export.pk,
        "run_id": world.run.pk,
        "candidate_id": world.candidate.pk,
        "entry_id": world.entry.pk,
        "campaign_id": world.campaign.pk,
        "blind_id": world.item.blind_id,
        "figure": "histograms",
        "judge_id": world.judge.pk,
        "assignment_id": world.assignment.pk,
        "judgement_id": world.judgement.pk,
        "app_label": "annotation",
        "object_id": world.curation.pk,
        "content_type_id": 1,
        "user_id": world.users["outsider"].pk,
    }


def url_for(name: str, params: tuple[str, ...], integers: bool, world: World) -> str:
    known = existing_values(world)
    # A parameter added later (a training run id, say) gets 1: an object made first.
    kwargs = {p: known.get(p, 1 if integers else "1") for p in params}
    return reverse(name, kwargs=kwargs)


def test_it_finds_the_app_urls():
    names = {name for name, _, _ in PATTERNS}
    assert {"curation_audit", "rating_rate", "catalog_detail", "api_rating_submit"} <= names


@pytest.mark.parametrize("method", ["get", "post"])
@pytest.mark.parametrize(
    ("name", "params", "integers"), [p for p in PATTERNS if p[0] not in PUBLIC | LOGOUT]
)
def test_it_turns_anonymous_visitors_away(world, name, params, integers, method):
    url = url_for(name, params, integers, world)
    response = getattr(Client(), method)(url)
    if response.status_code == 302:
        logins = (reverse("login"), reverse("admin:login"))
        assert response["Location"].startswith(logins), (url, response["Location"])
    else:
        assert response.status_code in (401, 403), (url, response.status_code)


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_it_shows_the_login_pages_to_anonymous_visitors(name):
    assert Client().get(reverse(name)).status_code == 200


@pytest.mark.parametrize(
    ("name", "params", "integers"), [p for p in PATTERNS if p[0] not in LOGOUT]
)
def test_it_refuses_a_signed_in_post_without_the_csrf_token(world, name, params, integers):
    client = Client(enforce_csrf_checks=True)
    client.force_login(world.users["staff"])
    response = client.post(url_for(name, params, integers, world), {"comment": "x"})
    assert response.status_code == 403, (name, response.status_code)


# --- roles: who may reach what ------------------------------------------------------------------
#
# The one declared matrix: URL name -> the roles that pass its role rule. "none" is a signed-in
# account without a role; anonymous visitors are refused everywhere (the tests above). A URL
# missing here fails test_it_declares_every_url_in_the_role_matrix, so a new page or API cannot
# ship without saying who may reach it. "Reach" means the role gate lets the request through;
# object rules (whose curation, which campaign) may still refuse it afterwards, with a
# different message.

NONE, V, R, E, M, S = "none", "viewer", "rater", "expert", "ml_engineer", "staff"
ROLES = (NONE, V, R, E, M, S)
EVERYONE = {NONE, V, R, E, M, S}
READERS = {V, E, M, S}  # spectra and catalog: everyone with a role but raters (blinding)

MATRIX: dict[str, set[str]] = {
    "home": EVERYONE,
    "api_schema": EVERYONE,
    "api_token_page": EVERYONE,
    "api_token": EVERYONE,
    "api_token_issue": EVERYONE,
    # spectra
    "spectrum_list": READERS,
    "spectrum_detail": READERS,
    "spectrum_render": READERS,
    "spectrum_render_png": READERS,
    "spectrum_viewer_fit": READERS,
    "spectrum_upload": {E, M, S},
    "api_task_list": READERS,
    "api_spectrum_list": READERS,
    "api_spectrum_detail": READERS,
    "api_spectrum_render": READERS,
    "api_spectrum_plot": READERS,
    "api_spectrum_upload": {E, M, S},
    "api_spectrum_redshift": READERS,
    "api_spectrum_overlay": READERS,
    "spectrum_redshift_decide": {E},
    "api_spectrum_redshift_decide": {E},
    "spectrum_redshift_undo": {E},
    "api_spectrum_redshift_undo": {E},
    # catalog and vetting
    "catalog_list": READERS,
    "catalog_detail": READERS,
    "catalog_report": READERS,
    "catalog_image": READERS,
    "catalog_export_csv": READERS,
    "catalog_export_votable": READERS,
    "catalog_export_fits": READERS,
    "api_catalog_list": READERS,
    "api_catalog_detail": READERS,
    "vetting_queue": {E},
    "vetting_decide": {E},
    "vetting_skip": {E},
    "vetting_undo": {E},
    "catalog_compare": READERS,
    "model_promote": {S},
    "label_export_list": {M, S},
    "label_export_create": {M},
    "label_export_download": {M, S},
    "revised_export_create": {M},
    "preference_export_create": {M},
    "api_label_exports": {M, S},
    "api_label_export_create": {M},
    "api_label_export_download": {M, S},
    "api_revised_exports": {M, S},
    "api_revised_export_create": {M},
    "api_revised_export_download": {M, S},
    "api_preference_exports": {M, S},
    "api_preference_export_create": {M},
    "api_preference_export_download": {M, S},
    "api_model_comparison": READERS,
    "api_model_promote": {S},
    "api_vetting_next": {E},
    "api_expert_decision_create": {E},
    "vetting_manage": {S},
    "vetting_manage_act": {S},
    "api_vetting_queue_action": {S},
    "catalog_sparkline": READERS,
    "duplicate_groups": READERS,
    "duplicate_group": READERS,
    "spectrum_similar": READERS,
    "api_spectrum_similar": READERS,
    "spectrum_similar_queue": {S},
    "api_spectrum_similar_queue": {S},
    # the vetting loop: calibration, triage, audit samples, gold items
    "calibration": READERS,
    "calibration_refit": {M, S},
    "triage_target": {S},
    "audit_draw": {S},
    "audit_close": {S},
    "gold": {S},
    "gold_mark": {S},
    "gold_retire": {S},
    "api_calibration_detail": READERS,
    "api_calibration_refit": {M, S},
    "api_triage_target": {S},
    "api_audit_sample_create": {S},
    "api_gold_item_create": {S},
    "api_gold_accuracy": {S},
    # curation
    "curation_my_work": {E},
    "api_curation_my_work": {E},
    "curation_list": {E, M, S},
    "curation_detail": {E, M, S},
    "curation_version": {E, M, S},
    "curation_image": {E, M, S},
    "curation_standardized": {E, M, S},
    "api_curation_list": {E, M, S},
    "api_curation_detail": {E, M, S},
    "api_curation_version": {E, M, S},
    "api_curation_history": {E, M, S},
    "api_curation_image": {E, M, S},
    "curation_screen": {E},
    "curation_claim_revision": {E},
    "curation_revise": {E},
    "curation_step_image": {E},
    "curation_autosave": {E},
    "curation_submit": {E},
    "curation_claim_audit": {E},
    "curation_audit": {E},
    "curation_vote": {E},
    "api_curation_screen": {E},
    "api_curation_claim_revision": {E},
    "api_curation_save_revision": {E},
    "api_curation_autosave": {E},
    "api_curation_submit": {E},
    "api_curation_claim_audit": {E},
    "api_curation_audit": {E},
    "api_curation_vote": {E},
    "curation_reassign": {S},
    "curation_standardize_run": {S},
    "api_curation_reassign": {S},
    "api_curation_standardize": {S},
    "curation_planted": {S},
    "curation_analysis": {S},
    "api_curation_planted": {S},
    "api_curation_analysis": {S},
    "curation_draft_new": {M},
    "curation_import": {M},
    "api_curation_drafts": {M},
    "api_curation_import": {M},
    # jobs and datasets
    "job_list": {M, S},
    "job_detail": {M, S},
    "job_cancel": {M, S},
    "api_job_list": {M, S},
    "api_job_detail": {M, S},
    "api_job_cancel": {M, S},
    "dataset_list": {M, S},
    "dataset_download": {M, S},
    "api_dataset_list": {M, S},
    "api_dataset_download": {M, S},
    "dataset_export": {M},
    "api_dataset_export": {M},
    # inspections
    "run_list": {E, M, S},
    "run_detail": {E, M, S},
    "candidate_live": {E, M, S},
    "candidate_steps": {E, M, S},
    "candidate_outcome": {E, M, S},
    "api_run_list": {E, M, S},
    "api_run_detail": {E, M, S},
    "api_candidate_detail": {E, M, S},
    "api_candidate_steps": {E, M, S},
    "image_blob": {R, E, M, S},
    "run_create": {M},
    "evaluation_list": READERS,
    "api_evaluation_list": READERS,
    "evaluation_start": {M},
    "api_run_create": {M},
    "run_cancel": {M, S},
    "candidate_retry": {M, S},
    "api_run_cancel": {M, S},
    "api_run_shift_check": {M, S},
    "api_candidate_retry": {M, S},
    "run_resend": {S},
    "api_run_resend": {S},
    "run_evidence_ablation": {S},
    "api_run_evidence_ablation": {S},
    # Reproduce: whoever follows runs, for the rule-based inspector (the matrix's runs are)
    "candidate_reproduce": {E, M, S},
    "api_candidate_reproduce": {E, M, S},
    # rating
    "rating_campaigns": {R, S},
    "rating_campaign": {R, S},
    "rating_analysis": {R, S},
    "rating_analysis_csv": {R, S},
    "rating_item": {R, S},
    "api_rating_campaigns": {R, S},
    "api_rating_campaign": {R, S},
    "api_rating_analysis": {R, S},
    "api_rating_analysis_figure": {R, S},
    "rating_rate": {R},
    "rating_pairs": {R},
    "api_rating_next_item": {R},
    "api_rating_item_plot": {R},
    "api_rating_submit": {R},
    "api_rating_next_pair": {R},
    "api_rating_pair_submit": {R},
    "rating_campaign_create": {S},
    "rating_campaign_close": {S},
    "rating_judges": {S},
    "rating_judge_run": {S},
    "api_rating_campaign_create": {S},
    "api_rating_campaign_close": {S},
    "api_rating_judges": {S},
    "api_rating_judge_create": {S},
    "api_rating_judge_run": {S},
    # training
    "training_list": {M, S},
    "training_detail": {M, S},
    "api_training_list": {M, S},
    "api_training_detail": {M, S},
    "api_training_metrics": {M, S},
    "api_policy_checkpoint_list": {M, S},
    "training_create": {M},
    "api_training_create": {M},
    "training_cancel": {M, S},
    "api_training_cancel": {M, S},
    # staff: accounts and roles, model endpoints, the audit log
    "account_roles": {S},
    "account_roles_set": {S},
    "api_account_roles": {S},
    "api_account_roles_set": {S},
    "endpoint_list": {S},
    "endpoint_create": {S},
    "endpoint_edit": {S},
    "endpoint_toggle": {S},
    "api_endpoint_list": {E, M, S},  # names and models only, to choose one; staff see the rest
    "api_endpoint_detail": {S},
    "api_endpoint_create": {S},
    "api_endpoint_update": {S},
    "audit_log": {S},
    "api_audit_log": {S},
}
ADMIN = {S}  # every admin:* URL: Django's admin lets only staff in (its own login otherwise)


def declared(name: str) -> set[str] | None:
    return ADMIN if name.startswith("admin:") else MATRIX.get(name)


def test_it_declares_every_url_in_the_role_matrix():
    names = {name for name, _, _ in PATTERNS} - PUBLIC - LOGOUT
    assert sorted(n for n in names if declared(n) is None) == []
    assert sorted(set(MATRIX) - names) == []  # no stale entries either


@pytest.fixture(scope="module")
def actors(world, django_db_blocker) -> dict[str, Client]:
    """One signed-in client per role, each account holding that role only."""
    clients = {}
    with django_db_blocker.unblock():
        for role in ROLES:
            user = UserFactory(username=f"only-{role}", roles=[] if role == NONE else [role])
            client = Client(raise_request_exception=False)
            client.force_login(user)
            clients[role] = client
    return clients


def refused_by_role(response) -> bool:
    return response.status_code == 403 and REFUSAL in response.content.decode(errors="replace")


def reached(name: str, response) -> bool:
    """Through the gate: not refused by role, not sent to a login page."""
    if response.status_code == 302 and response["Location"].startswith(
        (reverse("login"), reverse("admin:login"))
    ):
        return False
    return not refused_by_role(response)


@pytest.mark.parametrize(
    ("name", "params", "integers"), [p for p in PATTERNS if p[0] not in PUBLIC | LOGOUT]
)
def test_it_lets_each_role_reach_only_what_the_matrix_declares(
    world, actors, name, params, integers
):
    allowed = declared(name)
    assert allowed is not None, f"{name} is not in the role matrix"
    url = url_for(name, params, integers, world)
    wrong = []
    for method in ("get", "post"):
        for role in ROLES:
            response = getattr(actors[role], method)(url, {"comment": "x"})
            if role in allowed:
                if not reached(name, response) or response.status_code >= 500:
                    wrong.append(f"{method.upper()} as {role}: {response.status_code}, refused")
            elif name.startswith("admin:"):
                if reached(name, response):
                    wrong.append(f"{method.upper()} as {role}: {response.status_code}, let in")
            elif not refused_by_role(response):
                wrong.append(f"{method.upper()} as {role}: {response.status_code}, not a role 403")
    assert wrong == [], f"{url}: {wrong}"
