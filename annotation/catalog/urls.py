from __future__ import annotations

from django.urls import path

from annotation.catalog import (
    apis,
    model_apis,
    queue_apis,
    queue_views,
    similar_apis,
    similar_views,
    spectrum_views,
    views,
)

urlpatterns = [
    path("catalog/", views.catalog_list, name="catalog_list"),
    path("catalog/<int:entry_id>/", views.catalog_detail, name="catalog_detail"),
    path("catalog/<int:entry_id>/report.html", views.catalog_report, name="catalog_report"),
    path("catalog/images/<str:sha256>.png", views.catalog_image, name="catalog_image"),
    path("catalog/export.csv", views.catalog_export_csv, name="catalog_export_csv"),
    path("catalog/export.vot", views.catalog_export_votable, name="catalog_export_votable"),
    path("catalog/export.fits", views.catalog_export_fits, name="catalog_export_fits"),
    path("catalog/compare/", views.catalog_compare, name="catalog_compare"),
    path(
        "catalog/sparklines/<int:spectrum_id>.svg",
        spectrum_views.catalog_sparkline,
        name="catalog_sparkline",
    ),
    path("catalog/duplicates/", spectrum_views.duplicate_groups, name="duplicate_groups"),
    path(
        "catalog/duplicates/<str:content_hash>/",
        spectrum_views.duplicate_group,
        name="duplicate_group",
    ),
    path("catalog/models/promote/", views.model_promote, name="model_promote"),
    path(
        "spectra/<int:spectrum_id>/similar/",
        similar_views.spectrum_similar,
        name="spectrum_similar",
    ),
    path(
        "spectra/<int:spectrum_id>/similar/queue/",
        similar_views.spectrum_similar_queue,
        name="spectrum_similar_queue",
    ),
    path("vetting/", views.vetting_queue, name="vetting_queue"),
    path("vetting/decide/", views.vetting_decide, name="vetting_decide"),
    path("vetting/skip/", views.vetting_skip, name="vetting_skip"),
    path("vetting/undo/", views.vetting_undo, name="vetting_undo"),
    path("vetting/manage/", queue_views.vetting_manage, name="vetting_manage"),
    path("vetting/manage/act/", queue_views.vetting_manage_act, name="vetting_manage_act"),
    # API
    path("api/catalog/", apis.CatalogListApi.as_view(), name="api_catalog_list"),
    path(
        "api/catalog/<int:entry_id>/",
        apis.CatalogEntryDetailApi.as_view(),
        name="api_catalog_detail",
    ),
    path(
        "api/catalog/compare/",
        model_apis.ModelComparisonApi.as_view(),
        name="api_model_comparison",
    ),
    path(
        "api/catalog/models/promote/",
        model_apis.ModelPromoteApi.as_view(),
        name="api_model_promote",
    ),
    path(
        "api/spectra/<int:spectrum_id>/similar/",
        similar_apis.SpectrumSimilarApi.as_view(),
        name="api_spectrum_similar",
    ),
    path(
        "api/spectra/<int:spectrum_id>/similar/queue/",
        similar_apis.SpectrumSimilarQueueApi.as_view(),
        name="api_spectrum_similar_queue",
    ),
    path("api/vetting/next/", apis.VettingNextApi.as_view(), name="api_vetting_next"),
    path(
        "api/vetting/decisions/",
        apis.ExpertDecisionCreateApi.as_view(),
        name="api_expert_decision_create",
    ),
    path(
        "api/vetting/queue/actions/",
        queue_apis.VettingQueueActionApi.as_view(),
        name="api_vetting_queue_action",
    ),
]
