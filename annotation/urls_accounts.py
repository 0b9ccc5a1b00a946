"""Accounts and roles (staff): the page and its API twin."""

from __future__ import annotations

from django.urls import path

from annotation.apis import accounts as apis
from annotation.views import accounts as views

urlpatterns = [
    path("accounts/roles/", views.roles_list, name="account_roles"),
    path("accounts/roles/<int:user_id>/", views.roles_set, name="account_roles_set"),
    path("api/accounts/roles/", apis.AccountRolesListApi.as_view(), name="api_account_roles"),
    path(
        "api/accounts/roles/<int:user_id>/",
        apis.AccountRolesSetApi.as_view(),
        name="api_account_roles_set",
    ),
]
