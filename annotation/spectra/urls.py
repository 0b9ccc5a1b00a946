"""Home, spectra and tasks: pages and their API twins."""

from __future__ import annotations

from django.urls import path

from annotation.spectra import apis, views

urlpatterns = [
    path("spectra/", views.spectrum_list, name="spectrum_list"),
    path("spectra/upload/", views.spectrum_upload, name="spectrum_upload"),
    path("spectra/<int:spectrum_id>/", views.spectrum_detail, name="spectrum_detail"),
    path("spectra/<int:spectrum_id>/render/", views.spectrum_render, name="spectrum_render"),
    path(
        "spectra/<int:spectrum_id>/render.png",
        views.spectrum_render_png,
        name="spectrum_render_png",
    ),
    path(
        "spectra/<int:spectrum_id>/viewer-fit/",
        views.spectrum_viewer_fit,
        name="spectrum_viewer_fit",
    ),
    path(
        "spectra/<int:spectrum_id>/redshift/",
        views.spectrum_redshift_decide,
        name="spectrum_redshift_decide",
    ),
    path(
        "spectra/<int:spectrum_id>/redshift/undo/",
        views.spectrum_redshift_undo,
        name="spectrum_redshift_undo",
    ),
    path("api/tasks/", apis.TaskListApi.as_view(), name="api_task_list"),
    path("api/spectra/", apis.SpectrumListApi.as_view(), name="api_spectrum_list"),
    path(
        "api/spectra/upload/",
        apis.SpectrumUploadApi.as_view(),
        name="api_spectrum_upload",
    ),
    path(
        "api/spectra/<int:spectrum_id>/",
        apis.SpectrumDetailApi.as_view(),
        name="api_spectrum_detail",
    ),
    path(
        "api/spectra/<int:spectrum_id>/render/",
        apis.SpectrumRenderApi.as_view(),
        name="api_spectrum_render",
    ),
    path(
        "api/spectra/<int:spectrum_id>/redshift/",
        apis.SpectrumRedshiftApi.as_view(),
        name="api_spectrum_redshift",
    ),
    path(
        "api/spectra/<int:spectrum_id>/redshift/decide/",
        apis.SpectrumRedshiftDecideApi.as_view(),
        name="api_spectrum_redshift_decide",
    ),
    path(
        "api/spectra/<int:spectrum_id>/redshift/undo/",
        apis.SpectrumRedshiftUndoApi.as_view(),
        name="api_spectrum_redshift_undo",
    ),
    path(
        "api/spectra/<int:spectrum_id>/overlay/",
        apis.SpectrumOverlayApi.as_view(),
        name="api_spectrum_overlay",
    ),
    path(
        "api/spectra/<int:spectrum_id>/plot/",
        apis.SpectrumPlotWindowApi.as_view(),
        name="api_spectrum_plot",
    ),
]
