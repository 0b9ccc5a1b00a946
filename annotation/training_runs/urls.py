"""Training pages and their API twins."""

from __future__ import annotations

from django.urls import path

from annotation.training_runs import apis, views

urlpatterns = [
    path("training/", views.training_list, name="training_list"),
    path("training/new/", views.training_create, name="training_create"),
    path("training/<int:run_id>/", views.training_detail, name="training_detail"),
    path("training/<int:run_id>/cancel/", views.training_cancel, name="training_cancel"),
    # API
    path("api/training/", apis.TrainingRunListApi.as_view(), name="api_training_list"),
    path("api/training/create/", apis.TrainingRunCreateApi.as_view(), name="api_training_create"),
    path(
        "api/training/<int:run_id>/",
        apis.TrainingRunDetailApi.as_view(),
        name="api_training_detail",
    ),
    path(
        "api/training/<int:run_id>/metrics/",
        apis.TrainingRunMetricsApi.as_view(),
        name="api_training_metrics",
    ),
    path(
        "api/training/<int:run_id>/cancel/",
        apis.TrainingRunCancelApi.as_view(),
        name="api_training_cancel",
    ),
    path(
        "api/policies/",
        apis.PolicyCheckpointListApi.as_view(),
        name="api_policy_checkpoint_list",
    ),
]
