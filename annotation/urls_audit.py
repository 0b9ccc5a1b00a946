from __future__ import annotations

from django.urls import path

from annotation.apis import audit as apis
from annotation.views import audit as views

urlpatterns = [
    path("audit-log/", views.audit_log, name="audit_log"),
    path("api/audit-log/", apis.AuditLogListApi.as_view(), name="api_audit_log"),
]
