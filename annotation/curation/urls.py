"""Curation, jobs and dataset pages and their API twins."""

from __future__ import annotations

from django.urls import path, re_path

from annotation.core import apis as core_apis
from annotation.core import views as core_views
from annotation.curation import apis as curation_apis
from annotation.curation import apis_planted as curation_apis_planted
from annotation.curation import views as curation_views
from annotation.curation import views_editor as curation_views_editor
from annotation.curation import views_planted as curation_views_planted

SHA256 = r"(?P<sha256>[0-9a-f]{64})"

pages = [
    path("curation/", curation_views.my_work, name="curation_my_work"),
    path("curation/all/", curation_views.curation_list, name="curation_list"),
    path(
        "curation/analysis/",
        curation_views_planted.curation_analysis,
        name="curation_analysis",
    ),
    path("curation/planted/", curation_views_planted.planted_audits, name="curation_planted"),
    path("curation/drafts/new/", curation_views.draft_new, name="curation_draft_new"),
    path("curation/import/", curation_views.curation_import, name="curation_import"),
    re_path(
        rf"^curation/images/{SHA256}\.png$", curation_views.curation_image, name="curation_image"
    ),
    path("curation/<int:curation_id>/", curation_views.curation_detail, name="curation_detail"),
    path(
        "curation/<int:curation_id>/versions/<int:number>/",
        curation_views.version_detail,
        name="curation_version",
    ),
    path("curation/<int:curation_id>/screen/", curation_views.screen, name="curation_screen"),
    path(
        "curation/<int:curation_id>/claim-revision/",
        curation_views.claim_revision,
        name="curation_claim_revision",
    ),
    path(
        "curation/<int:curation_id>/revise/", curation_views_editor.revise, name="curation_revise"
    ),
    path(
        "curation/<int:curation_id>/revise/step-image/",
        curation_views_editor.step_image,
        name="curation_step_image",
    ),
    path(
        "curation/<int:curation_id>/revise/autosave/",
        curation_views_editor.autosave,
        name="curation_autosave",
    ),
    path(
        "curation/<int:curation_id>/submit/",
        curation_views.submit_for_audit,
        name="curation_submit",
    ),
    path(
        "curation/<int:curation_id>/claim-audit/",
        curation_views.claim_audit,
        name="curation_claim_audit",
    ),
    path("curation/<int:curation_id>/audit/", curation_views.audit, name="curation_audit"),
    path(
        "curation/<int:curation_id>/standardized/",
        curation_views.standardized,
        name="curation_standardized",
    ),
    path(
        "curation/<int:curation_id>/standardize/",
        curation_views.standardize_run,
        name="curation_standardize_run",
    ),
    path("curation/<int:curation_id>/vote/", curation_views.vote, name="curation_vote"),
    path("curation/<int:curation_id>/reassign/", curation_views.reassign, name="curation_reassign"),
    path("jobs/", core_views.job_list, name="job_list"),
    path("jobs/<int:job_id>/", core_views.job_detail, name="job_detail"),
    path("jobs/<int:job_id>/cancel/", core_views.job_cancel, name="job_cancel"),
    path("datasets/", curation_views.dataset_list, name="dataset_list"),
    path("datasets/export/", curation_views.dataset_export, name="dataset_export"),
    path(
        "datasets/<int:export_id>/download/",
        curation_views.dataset_download,
        name="dataset_download",
    ),
]

api = [
    path("api/curation/", curation_apis.CurationListApi.as_view(), name="api_curation_list"),
    path("api/curation/my-work/", curation_apis.MyWorkApi.as_view(), name="api_curation_my_work"),
    path(
        "api/curation/analysis/",
        curation_apis_planted.CurationAnalysisApi.as_view(),
        name="api_curation_analysis",
    ),
    path(
        "api/curation/planted/",
        curation_apis_planted.PlantedAuditsApi.as_view(),
        name="api_curation_planted",
    ),
    path(
        "api/curation/drafts/",
        curation_apis.DraftJobCreateApi.as_view(),
        name="api_curation_drafts",
    ),
    path(
        "api/curation/import/",
        curation_apis.CurationImportApi.as_view(),
        name="api_curation_import",
    ),
    re_path(
        rf"^api/curation/images/{SHA256}\.png$",
        curation_apis.CurationImageApi.as_view(),
        name="api_curation_image",
    ),
    path(
        "api/curation/<int:curation_id>/",
        curation_apis.CurationDetailApi.as_view(),
        name="api_curation_detail",
    ),
    path(
        "api/curation/<int:curation_id>/versions/<int:number>/",
        curation_apis.CurationVersionDetailApi.as_view(),
        name="api_curation_version",
    ),
    path(
        "api/curation/<int:curation_id>/history/",
        curation_apis.CurationHistoryApi.as_view(),
        name="api_curation_history",
    ),
    path(
        "api/curation/<int:curation_id>/screen/",
        curation_apis.CurationScreenApi.as_view(),
        name="api_curation_screen",
    ),
    path(
        "api/curation/<int:curation_id>/claim-revision/",
        curation_apis.CurationClaimRevisionApi.as_view(),
        name="api_curation_claim_revision",
    ),
    path(
        "api/curation/<int:curation_id>/revisions/",
        curation_apis.CurationRevisionSaveApi.as_view(),
        name="api_curation_save_revision",
    ),
    path(
        "api/curation/<int:curation_id>/autosave/",
        curation_apis.CurationAutosaveApi.as_view(),
        name="api_curation_autosave",
    ),
    path(
        "api/curation/<int:curation_id>/submit-for-audit/",
        curation_apis.CurationSubmitForAuditApi.as_view(),
        name="api_curation_submit",
    ),
    path(
        "api/curation/<int:curation_id>/claim-audit/",
        curation_apis.CurationClaimAuditApi.as_view(),
        name="api_curation_claim_audit",
    ),
    path(
        "api/curation/<int:curation_id>/audits/",
        curation_apis.AuditSubmitApi.as_view(),
        name="api_curation_audit",
    ),
    path(
        "api/curation/<int:curation_id>/votes/",
        curation_apis.VoteCastApi.as_view(),
        name="api_curation_vote",
    ),
    path(
        "api/curation/<int:curation_id>/reassign/",
        curation_apis.CurationReassignApi.as_view(),
        name="api_curation_reassign",
    ),
    path(
        "api/curation/<int:curation_id>/standardize/",
        curation_apis.CurationStandardizeApi.as_view(),
        name="api_curation_standardize",
    ),
    path("api/jobs/", core_apis.JobListApi.as_view(), name="api_job_list"),
    path("api/jobs/<int:job_id>/", core_apis.JobDetailApi.as_view(), name="api_job_detail"),
    path("api/jobs/<int:job_id>/cancel/", core_apis.JobCancelApi.as_view(), name="api_job_cancel"),
    path("api/datasets/", curation_apis.DatasetListApi.as_view(), name="api_dataset_list"),
    path(
        "api/datasets/exports/",
        curation_apis.DatasetExportCreateApi.as_view(),
        name="api_dataset_export",
    ),
    path(
        "api/datasets/<int:export_id>/download/",
        curation_apis.DatasetDownloadApi.as_view(),
        name="api_dataset_download",
    ),
]

urlpatterns = pages + api
