"""Roles: granted and revoked by staff (page, API, admin, command line), audit-logged, enforced.

Which role reaches which URL is the matrix in test_url_access.py; these tests cover how roles
change hands and how a refusal reads.
"""

from __future__ import annotations

from io import StringIO

import pytest
from django.contrib.auth.models import Group
from django.core.management import CommandError, call_command
from django.test import Client, RequestFactory
from django.urls import reverse
from rest_framework.test import APIClient, force_authenticate
from rest_framework.views import APIView

from annotation.core import errors as core_errors
from annotation.core import permissions
from annotation.core import services as core_services
from annotation.core.models import AuditLog
from annotation.core.roles import Role, forget_roles, parse_role, user_roles
from annotation.rating.forms import CampaignForm
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


def page(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def api(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def roles_of(user) -> set[str]:
    forget_roles(user)
    return {role.value for role in user_roles(user)}


def role_entries(user) -> list[tuple[str, str, str | None]]:
    rows = AuditLog.objects.filter(object_type=type(user).__name__, object_pk=str(user.pk))
    return [
        (row.action, row.to_state, row.actor.username if row.actor else None)
        for row in rows.order_by("id")
    ]


@pytest.fixture
def newcomer(db):
    return UserFactory(username="newcomer")


# --- the groups -----------------------------------------------------------------------------


def test_it_creates_the_four_role_groups_with_permissions():
    groups = {
        g.name: set(g.permissions.values_list("codename", flat=True)) for g in Group.objects.all()
    }
    assert {"expert", "rater", "ml_engineer", "viewer"} <= set(groups)
    assert groups["viewer"] == {"view_spectrum", "view_task", "view_catalogentry"}
    assert "add_audit" in groups["expert"] and "add_audit" not in groups["ml_engineer"]
    assert "add_trainingrun" in groups["ml_engineer"]
    assert not any(name.startswith(("add_", "change_", "delete_")) for name in groups["viewer"])


def test_it_reads_role_names_as_people_write_them():
    assert parse_role("ML engineer") == parse_role("ml-engineer") == Role.ML_ENGINEER
    with pytest.raises(ValueError, match="the roles are expert, rater"):
        parse_role("admin")


# --- the service ------------------------------------------------------------------------------


def test_it_sets_roles_and_records_each_change(newcomer, staff):
    granted, revoked = core_services.user_roles_set(
        user=newcomer, roles={Role.EXPERT, Role.STAFF}, actor=staff
    )
    assert (granted, revoked) == ([Role.EXPERT, Role.STAFF], [])
    newcomer.refresh_from_db()
    assert newcomer.is_staff and roles_of(newcomer) == {"expert", "staff"}
    core_services.user_roles_set(user=newcomer, roles={Role.VIEWER}, actor=staff)
    assert roles_of(newcomer) == {"viewer"}
    assert role_entries(newcomer) == [
        ("role_granted", "expert", "stella"),
        ("role_granted", "staff", "stella"),
        ("role_granted", "viewer", "stella"),
        ("role_revoked", "expert", "stella"),
        ("role_revoked", "staff", "stella"),
    ]


def test_it_records_nothing_when_nothing_changes(newcomer, staff):
    core_services.user_roles_set(user=newcomer, roles={Role.RATER}, actor=staff)
    assert core_services.user_roles_set(user=newcomer, roles={Role.RATER}, actor=staff) == ([], [])
    assert len(role_entries(newcomer)) == 1


def test_it_refuses_to_drop_ones_own_staff_role(staff):
    with pytest.raises(core_errors.NotAllowed, match="your own staff role"):
        core_services.user_roles_set(user=staff, roles=set(), actor=staff)
    assert roles_of(staff) == {"staff"}


def test_it_leaves_superusers_to_the_admin(staff):
    root = UserFactory(username="root", is_superuser=True, is_staff=True)
    with pytest.raises(core_errors.NotAllowed, match="superuser"):
        core_services.user_roles_set(user=root, roles=set(), actor=staff)


# --- the page and its API twin --------------------------------------------------------------


def test_it_lists_accounts_with_their_roles_for_staff(staff, expert, viewer):
    html = page(staff).get(reverse("account_roles")).content.decode()
    assert 'aria-label="payne: expert" checked' in html
    assert 'aria-label="viewer: viewer" checked' in html
    assert 'aria-label="payne: rater" checked' not in html


def test_it_changes_roles_from_the_page(staff, newcomer):
    response = page(staff).post(
        reverse("account_roles_set", args=[newcomer.pk]),
        {"roles": ["rater", "viewer"], "next": reverse("account_roles") + "?q=new"},
    )
    assert response["Location"] == reverse("account_roles") + "?q=new"
    assert roles_of(newcomer) == {"rater", "viewer"}
    assert [e[:2] for e in role_entries(newcomer)] == [
        ("role_granted", "rater"),
        ("role_granted", "viewer"),
    ]


def test_it_shows_a_refused_change_as_a_403_with_the_reason(staff):
    response = page(staff).post(reverse("account_roles_set", args=[staff.pk]), {"roles": []})
    assert response.status_code == 403
    assert "your own staff role" in response.content.decode()


def test_it_changes_and_lists_roles_through_the_api(staff, newcomer):
    url = reverse("api_account_roles_set", args=[newcomer.pk])
    data = api(staff).post(url, {"roles": ["ml_engineer"]}, format="json").json()
    assert (data["roles"], data["granted"], data["revoked"]) == (
        ["ml_engineer"],
        ["ml_engineer"],
        [],
    )
    bad = api(staff).post(url, {"roles": ["admin"]}, format="json")
    assert bad.status_code == 400 and "roles" in bad.json()
    listed = api(staff).get(reverse("api_account_roles"), {"q": "newc"}).json()
    assert [(row["username"], row["roles"]) for row in listed["results"]] == [
        ("newcomer", ["ml_engineer"])
    ]


@pytest.mark.parametrize("role", ["expert", "rater", "ml_engineer", "viewer"])
def test_it_keeps_everyone_but_staff_off_the_roles_page_and_api(role, newcomer):
    user = UserFactory(username=f"only-{role}", roles=[role])
    response = page(user).post(reverse("account_roles_set", args=[user.pk]), {"roles": ["staff"]})
    assert response.status_code == 403
    response = api(user).post(
        reverse("api_account_roles_set", args=[user.pk]), {"roles": ["staff"]}, format="json"
    )
    assert response.status_code == 403
    assert roles_of(user) == {role}


# --- the command line -------------------------------------------------------------------------


def test_it_grants_revokes_and_lists_from_the_command_line(newcomer):
    out = StringIO()
    call_command("roles", "grant", "newcomer", "expert", "rater", stdout=out)
    call_command("roles", "revoke", "newcomer", "rater", stdout=out)
    call_command("roles", "list", "newcomer", stdout=out)
    assert out.getvalue().splitlines()[-1] == "newcomer: expert"
    assert role_entries(newcomer) == [
        ("role_granted", "expert", None),
        ("role_granted", "rater", None),
        ("role_revoked", "rater", None),
    ]


def test_it_names_what_is_wrong_on_the_command_line(newcomer):
    with pytest.raises(CommandError, match="no account named 'nobody'"):
        call_command("roles", "grant", "nobody", "expert")
    with pytest.raises(CommandError, match="no role 'boss'"):
        call_command("roles", "grant", "newcomer", "boss")


# --- the admin --------------------------------------------------------------------------------


def test_it_lets_staff_assign_role_groups_in_the_admin_and_logs_them(staff, newcomer):
    expert = Group.objects.get(name="expert")
    client = page(staff)
    assert client.get(reverse("admin:auth_user_changelist")).status_code == 200
    url = reverse("admin:auth_user_change", args=[newcomer.pk])
    form = client.get(url).context["adminform"].form
    data = {k: v for k, v in form.initial.items() if v is not None and k != "password"}
    data.update(
        {
            "username": "newcomer",
            "groups": [expert.pk],
            "is_active": "on",
            "is_superuser": "on",  # read-only for staff: ignored
            "date_joined_0": "2026-01-01",
            "date_joined_1": "00:00:00",
        }
    )
    data.pop("last_login", None)
    data.pop("user_permissions", None)
    response = client.post(url, data)
    assert response.status_code == 302, response.context["adminform"].form.errors
    newcomer.refresh_from_db()
    assert not newcomer.is_superuser
    assert roles_of(newcomer) == {"expert"}
    assert role_entries(newcomer) == [("role_granted", "expert", "stella")]


def test_it_keeps_staff_away_from_superusers_in_the_admin(staff):
    root = UserFactory(username="root", is_superuser=True, is_staff=True)
    response = page(staff).get(reverse("admin:auth_user_change", args=[root.pk]))
    assert b'name="username"' not in response.content  # read-only view, no form


# --- refusals and navigation ------------------------------------------------------------------


def test_it_explains_a_refusal_on_a_friendly_page(viewer):
    response = page(viewer).get(reverse("curation_list"))
    assert response.status_code == 403
    html = response.content.decode()
    assert "Not allowed by your roles: to read curated trajectories you need the expert or" in html
    assert "your roles: viewer" in html
    assert '<a href="/">Back to the home page</a>' in html


def test_it_explains_a_refusal_in_the_api(viewer):
    response = api(viewer).post(reverse("api_run_create"), {}, format="json")
    assert response.status_code == 403
    assert response.json()["detail"].startswith(
        "Not allowed by your roles: to start inspection runs you need the ml_engineer role"
    )


def test_it_shows_only_the_menu_entries_a_role_can_use(viewer, expert):
    viewer_html = page(viewer).get(reverse("home")).content.decode()
    expert_html = page(expert).get(reverse("home")).content.decode()
    for label, href in (("Curation", "/curation/all/"), ("Vetting queue", "/vetting/")):
        assert href not in viewer_html
        assert href in expert_html, label
    assert "/catalog/" in viewer_html and "/accounts/roles/" not in expert_html


def test_it_tells_an_account_without_a_role_to_ask_staff(newcomer):
    html = page(newcomer).get(reverse("home")).content.decode()
    assert "Your account has no role yet" in html
    assert page(newcomer).get(reverse("catalog_list")).status_code == 403


def test_it_refuses_a_page_that_declares_no_rule():
    def forgotten(request):
        raise AssertionError("the view ran")

    forgotten.__module__ = "annotation.views.new_domain"
    request = RequestFactory().get("/new/")
    request.user = UserFactory(username="root", is_superuser=True)
    middleware = permissions.RoleRuleMiddleware(lambda request: None)
    with pytest.raises(permissions.RoleRequired, match="declares no role rule"):
        middleware.process_view(request, forgotten, (), {})


def test_it_refuses_an_api_that_declares_no_rule():
    class ForgottenApi(APIView):
        def get(self, request):
            raise AssertionError("the view ran")

    request = RequestFactory().get("/api/new/")
    root = UserFactory(username="root", is_superuser=True)
    force_authenticate(request, user=root)
    response = ForgottenApi.as_view()(request)
    assert response.status_code == 403
    assert "declares no role rule" in response.data["detail"]


# --- rating: only raters are assigned -----------------------------------------------------------


def test_it_assigns_campaigns_only_to_raters(staff, expert, rater):
    response = api(staff).post(
        reverse("api_rating_campaign_create"),
        {"name": "c", "raters": ["payne", "maury"], "runs": [1]},
        format="json",
    )
    assert response.status_code == 400
    assert "not raters: payne" in str(response.json()["raters"])
    assert list(CampaignForm(user=staff).fields["raters"].queryset) == [rater]
