from __future__ import annotations

from django.urls import path

from annotation.inspections import ablation_apis, ablation_views, apis, evaluation_apis, views

urlpatterns = [
    path("inspections/", views.run_list, name="run_list"),
    path("evaluations/", views.evaluation_list, name="evaluation_list"),
    path("evaluations/new/", views.evaluation_start, name="evaluation_start"),
    path("inspections/new/", views.run_create, name="run_create"),
    path("inspections/<int:run_id>/", views.run_detail, name="run_detail"),
    path("inspections/<int:run_id>/cancel/", views.run_cancel, name="run_cancel"),
    path("inspections/<int:run_id>/resend/", views.run_resend, name="run_resend"),
    path(
        "inspections/<int:run_id>/evidence-ablation/",
        ablation_views.run_evidence_ablation,
        name="run_evidence_ablation",
    ),
    path(
        "inspections/candidates/<int:candidate_id>/",
        views.candidate_live,
        name="candidate_live",
    ),
    path(
        "inspections/candidates/<int:candidate_id>/steps/",
        views.candidate_steps,
        name="candidate_steps",
    ),
    path(
        "inspections/candidates/<int:candidate_id>/outcome/",
        views.candidate_outcome,
        name="candidate_outcome",
    ),
    path(
        "inspections/candidates/<int:candidate_id>/retry/",
        views.candidate_retry,
        name="candidate_retry",
    ),
    path(
        "inspections/candidates/<int:candidate_id>/reproduce/",
        views.candidate_reproduce,
        name="candidate_reproduce",
    ),
    path("images/<str:sha256>.png", views.image_blob, name="image_blob"),
    # API
    path("api/inspections/", apis.InspectionRunListApi.as_view(), name="api_run_list"),
    path(
        "api/evaluations/",
        evaluation_apis.EvaluationListApi.as_view(),
        name="api_evaluation_list",
    ),
    path("api/inspections/create/", apis.InspectionRunCreateApi.as_view(), name="api_run_create"),
    path(
        "api/inspections/<int:run_id>/",
        apis.InspectionRunDetailApi.as_view(),
        name="api_run_detail",
    ),
    path(
        "api/inspections/<int:run_id>/shift-check/",
        apis.InspectionRunShiftCheckApi.as_view(),
        name="api_run_shift_check",
    ),
    path(
        "api/inspections/<int:run_id>/evidence-ablation/",
        ablation_apis.RunEvidenceAblationApi.as_view(),
        name="api_run_evidence_ablation",
    ),
    path(
        "api/inspections/<int:run_id>/cancel/",
        apis.InspectionRunCancelApi.as_view(),
        name="api_run_cancel",
    ),
    path(
        "api/inspections/<int:run_id>/resend/",
        apis.InspectionRunResendApi.as_view(),
        name="api_run_resend",
    ),
    path(
        "api/inspections/candidates/<int:candidate_id>/",
        apis.CandidateDetailApi.as_view(),
        name="api_candidate_detail",
    ),
    path(
        "api/inspections/candidates/<int:candidate_id>/steps/",
        apis.CandidateStepsApi.as_view(),
        name="api_candidate_steps",
    ),
    path(
        "api/inspections/candidates/<int:candidate_id>/reproduce/",
        apis.CandidateReproduceApi.as_view(),
        name="api_candidate_reproduce",
    ),
    path(
        "api/inspections/candidates/<int:candidate_id>/retry/",
        apis.CandidateRetryApi.as_view(),
        name="api_candidate_retry",
    ),
]
