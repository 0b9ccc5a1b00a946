"""Curation, jobs and dataset pages and their API twins."""

from __future__ import annotations

from django.urls import path, re_path

from annotation.apis import curation as apis
from annotation.views import curation as views

SHA256 = r"(?P<sha256>[0-9a-f]{64})"

pages = [
    path("curation/", views.my_work, name="curation_my_work"),
    path("curation/all/", views.curation_list, name="curation_list"),
    path("curation/drafts/new/", views.draft_new, name="curation_draft_new"),
    path("curation/import/", views.curation_import, name="curation_import"),
    re_path(rf"^curation/images/{SHA256}\.png$", views.curation_image, name="curation_image"),
    path("curation/<int:curation_id>/", views.curation_detail, name="curation_detail"),
    path(
        "curation/<int:curation_id>/versions/<int:number>/",
        views.version_detail,
        name="curation_version",
    ),
    path("curation/<int:curation_id>/screen/", views.screen, name="curation_screen"),
    path(
        "curation/<int:curation_id>/claim-revision/",
        views.claim_revision,
        name="curation_claim_revision",
    ),
    path("curation/<int:curation_id>/revise/", views.revise, name="curation_revise"),
    path(
        "curation/<int:curation_id>/revise/step-image/",
        views.step_image,
        name="curation_step_image",
    ),
    path("curation/<int:curation_id>/revise/autosave/", views.autosave, name="curation_autosave"),
    path("curation/<int:curation_id>/submit/", views.submit_for_audit, name="curation_submit"),
    path("curation/<int:curation_id>/claim-audit/", views.claim_audit, name="curation_claim_audit"),
    path("curation/<int:curation_id>/audit/", views.audit, name="curation_audit"),
    path(
        "curation/<int:curation_id>/standardized/",
        views.standardized,
        name="curation_standardized",
    ),
    path(
        "curation/<int:curation_id>/standardize/",
        views.standardize_run,
        name="curation_standardize_run",
    ),
    path("curation/<int:curation_id>/vote/", views.vote, name="curation_vote"),
    path("curation/<int:curation_id>/reassign/", views.reassign, name="curation_reassign"),
    path("jobs/", views.job_list, name="job_list"),
    path("jobs/<int:job_id>/", views.job_detail, name="job_detail"),
    path("jobs/<int:job_id>/cancel/", views.job_cancel, name="job_cancel"),
    path("datasets/", views.dataset_list, name="dataset_list"),
    path("datasets/export/", views.dataset_export, name="dataset_export"),
    path("datasets/<int:export_id>/download/", views.dataset_download, name="dataset_download"),
]

api = [
    path("api/curation/", apis.CurationListApi.as_view(), name="api_curation_list"),
    path("api/curation/my-work/", apis.MyWorkApi.as_view(), name="api_curation_my_work"),
    path("api/curation/drafts/", apis.DraftJobCreateApi.as_view(), name="api_curation_drafts"),
    path("api/curation/import/", apis.CurationImportApi.as_view(), name="api_curation_import"),
    re_path(
        rf"^api/curation/images/{SHA256}\.png$",
        apis.CurationImageApi.as_view(),
        name="api_curation_image",
    ),
    path(
        "api/curation/<int:curation_id>/",
        apis.CurationDetailApi.as_view(),
        name="api_curation_detail",
    ),
    path(
        "api/curation/<int:curation_id>/versions/<int:number>/",
        apis.CurationVersionDetailApi.as_view(),
        name="api_curation_version",
    ),
    path(
        "api/curation/<int:curation_id>/history/",
        apis.CurationHistoryApi.as_view(),
        name="api_curation_history",
    ),
    path(
        "api/curation/<int:curation_id>/screen/",
        apis.CurationScreenApi.as_view(),
        name="api_curation_screen",
    ),
    path(
        "api/curation/<int:curation_id>/claim-revision/",
        apis.CurationClaimRevisionApi.as_view(),
        name="api_curation_claim_revision",
    ),
    path(
        "api/curation/<int:curation_id>/revisions/",
        apis.CurationRevisionSaveApi.as_view(),
        name="api_curation_save_revision",
    ),
    path(
        "api/curation/<int:curation_id>/autosave/",
        apis.CurationAutosaveApi.as_view(),
        name="api_curation_autosave",
    ),
    path(
        "api/curation/<int:curation_id>/submit-for-audit/",
        apis.CurationSubmitForAuditApi.as_view(),
        name="api_curation_submit",
    ),
    path(
        "api/curation/<int:curation_id>/claim-audit/",
        apis.CurationClaimAuditApi.as_view(),
        name="api_curation_claim_audit",
    ),
    path(
        "api/curation/<int:curation_id>/audits/",
        apis.AuditSubmitApi.as_view(),
        name="api_curation_audit",
    ),
    path(
        "api/curation/<int:curation_id>/votes/",
        apis.VoteCastApi.as_view(),
        name="api_curation_vote",
    ),
    path(
        "api/curation/<int:curation_id>/reassign/",
        apis.CurationReassignApi.as_view(),
        name="api_curation_reassign",
    ),
    path(
        "api/curation/<int:curation_id>/standardize/",
        apis.CurationStandardizeApi.as_view(),
        name="api_curation_standardize",
    ),
    path("api/jobs/", apis.JobListApi.as_view(), name="api_job_list"),
    path("api/jobs/<int:job_id>/", apis.JobDetailApi.as_view(), name="api_job_detail"),
    path("api/jobs/<int:job_id>/cancel/", apis.JobCancelApi.as_view(), name="api_job_cancel"),
    path("api/datasets/", apis.DatasetListApi.as_view(), name="api_dataset_list"),
    path(
        "api/datasets/exports/",
        apis.DatasetExportCreateApi.as_view(),
        name="api_dataset_export",
    ),
    path(
        "api/datasets/<int:export_id>/download/",
        apis.DatasetDownloadApi.as_view(),
        name="api_dataset_download",
    ),
]

urlpatterns = pages + api
