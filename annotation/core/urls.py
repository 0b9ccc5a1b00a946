"""Accounts and roles, API tokens, the audit log and model endpoints: pages and API twins."""

from __future__ import annotations

from django.urls import path

from annotation.core import apis, views

urlpatterns = [
    path("accounts/token/", views.api_token_page, name="api_token_page"),
    path("api/token/", apis.ApiTokenDetailApi.as_view(), name="api_token"),
    path("api/token/issue/", apis.ApiTokenIssueApi.as_view(), name="api_token_issue"),
    path("accounts/roles/", views.roles_list, name="account_roles"),
    path("accounts/roles/<int:user_id>/", views.roles_set, name="account_roles_set"),
    path("api/accounts/roles/", apis.AccountRolesListApi.as_view(), name="api_account_roles"),
    path(
        "api/accounts/roles/<int:user_id>/",
        apis.AccountRolesSetApi.as_view(),
        name="api_account_roles_set",
    ),
    path("audit-log/", views.audit_log, name="audit_log"),
    path("api/audit-log/", apis.AuditLogListApi.as_view(), name="api_audit_log"),
    path("endpoints/", views.endpoint_list, name="endpoint_list"),
    path("endpoints/new/", views.endpoint_create, name="endpoint_create"),
    path("endpoints/<int:endpoint_id>/edit/", views.endpoint_edit, name="endpoint_edit"),
    path("endpoints/<int:endpoint_id>/toggle/", views.endpoint_toggle, name="endpoint_toggle"),
    path("api/endpoints/", apis.EndpointListApi.as_view(), name="api_endpoint_list"),
    path("api/endpoints/create/", apis.EndpointCreateApi.as_view(), name="api_endpoint_create"),
    path(
        "api/endpoints/<int:endpoint_id>/",
        apis.EndpointDetailApi.as_view(),
        name="api_endpoint_detail",
    ),
    path(
        "api/endpoints/<int:endpoint_id>/update/",
        apis.EndpointUpdateApi.as_view(),
        name="api_endpoint_update",
    ),
]
