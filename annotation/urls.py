from __future__ import annotations

from django.urls import include, path

from annotation.apis import spectra as spectra_apis
from annotation.apis import tokens as token_apis
from annotation.views import spectra as spectra_views
from annotation.views import tokens as token_views

urlpatterns = [
    path("", spectra_views.home, name="home"),
    path("spectra/", spectra_views.spectrum_list, name="spectrum_list"),
    path("spectra/upload/", spectra_views.spectrum_upload, name="spectrum_upload"),
    path("spectra/<int:spectrum_id>/", spectra_views.spectrum_detail, name="spectrum_detail"),
    path(
        "spectra/<int:spectrum_id>/render/", spectra_views.spectrum_render, name="spectrum_render"
    ),
    path(
        "spectra/<int:spectrum_id>/render.png",
        spectra_views.spectrum_render_png,
        name="spectrum_render_png",
    ),
    path("api/tasks/", spectra_apis.TaskListApi.as_view(), name="api_task_list"),
    path("api/spectra/", spectra_apis.SpectrumListApi.as_view(), name="api_spectrum_list"),
    path(
        "api/spectra/upload/",
        spectra_apis.SpectrumUploadApi.as_view(),
        name="api_spectrum_upload",
    ),
    path(
        "api/spectra/<int:spectrum_id>/",
        spectra_apis.SpectrumDetailApi.as_view(),
        name="api_spectrum_detail",
    ),
    path(
        "api/spectra/<int:spectrum_id>/render/",
        spectra_apis.SpectrumRenderApi.as_view(),
        name="api_spectrum_render",
    ),
    path(
        "api/spectra/<int:spectrum_id>/plot/",
        spectra_apis.SpectrumPlotWindowApi.as_view(),
        name="api_spectrum_plot",
    ),
    path("accounts/token/", token_views.api_token_page, name="api_token_page"),
    path("api/token/", token_apis.ApiTokenDetailApi.as_view(), name="api_token"),
    path("api/token/issue/", token_apis.ApiTokenIssueApi.as_view(), name="api_token_issue"),
    path("", include("annotation.urls_curation")),
    path("", include("annotation.urls_inspections")),
    path("", include("annotation.urls_catalog")),
    path("", include("annotation.urls_rating")),
    path("", include("annotation.urls_training")),
    path("", include("annotation.urls_accounts")),
    path("", include("annotation.urls_audit")),
    path("", include("annotation.urls_endpoints")),
]
