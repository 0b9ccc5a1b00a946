"""Model endpoints (staff): the pages and their API twins."""

from __future__ import annotations

from django.urls import path

from annotation.apis import endpoints as apis
from annotation.views import endpoints as views

urlpatterns = [
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
