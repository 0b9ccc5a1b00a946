"""Rating campaigns (paper section 4.5, appendix G): pages and their API twins."""

from __future__ import annotations

from django.urls import path

from annotation.rating import apis, export_apis, views, views_exports

urlpatterns = [
    path("labels/exports/", views_exports.label_export_list, name="label_export_list"),
    path("labels/exports/new/", views_exports.label_export_create, name="label_export_create"),
    path(
        "labels/exports/v<int:version>.jsonl",
        views_exports.label_export_download,
        name="label_export_download",
    ),
    path(
        "labels/exports/revised/",
        views_exports.revised_export_create,
        name="revised_export_create",
    ),
    path(
        "labels/exports/preferences/",
        views_exports.preference_export_create,
        name="preference_export_create",
    ),
    path("rating/", views.campaign_list, name="rating_campaigns"),
    path("rating/new/", views.campaign_create, name="rating_campaign_create"),
    path("rating/judges/", views.judge_list, name="rating_judges"),
    path("rating/<int:campaign_id>/", views.campaign_detail, name="rating_campaign"),
    path("rating/<int:campaign_id>/close/", views.campaign_close, name="rating_campaign_close"),
    path("rating/<int:campaign_id>/rate/", views.rate, name="rating_rate"),
    path("rating/<int:campaign_id>/pairs/", views.pairs, name="rating_pairs"),
    path("rating/<int:campaign_id>/analysis/", views.analysis, name="rating_analysis"),
    path(
        "rating/<int:campaign_id>/analysis/<slug:figure>.csv",
        views.analysis_csv,
        name="rating_analysis_csv",
    ),
    path("rating/<int:campaign_id>/items/<str:blind_id>/", views.item_detail, name="rating_item"),
    path(
        "rating/<int:campaign_id>/judges/<int:judge_id>/run/",
        views.judge_run,
        name="rating_judge_run",
    ),
    # API
    path("api/labels/exports/", export_apis.LabelExportListApi.as_view(), name="api_label_exports"),
    path(
        "api/labels/exports/create/",
        export_apis.LabelExportCreateApi.as_view(),
        name="api_label_export_create",
    ),
    path(
        "api/labels/exports/<int:version>/download/",
        export_apis.LabelExportDownloadApi.as_view(),
        name="api_label_export_download",
    ),
    path(
        "api/labels/exports/revised/",
        export_apis.RevisedExportListApi.as_view(),
        name="api_revised_exports",
    ),
    path(
        "api/labels/exports/revised/create/",
        export_apis.RevisedExportCreateApi.as_view(),
        name="api_revised_export_create",
    ),
    path(
        "api/labels/exports/revised/<int:version>/download/",
        export_apis.RevisedExportDownloadApi.as_view(),
        name="api_revised_export_download",
    ),
    path(
        "api/labels/exports/preferences/",
        export_apis.PreferenceExportListApi.as_view(),
        name="api_preference_exports",
    ),
    path(
        "api/labels/exports/preferences/create/",
        export_apis.PreferenceExportCreateApi.as_view(),
        name="api_preference_export_create",
    ),
    path(
        "api/labels/exports/preferences/<int:version>/download/",
        export_apis.PreferenceExportDownloadApi.as_view(),
        name="api_preference_export_download",
    ),
    path("api/rating/campaigns/", apis.CampaignListApi.as_view(), name="api_rating_campaigns"),
    path(
        "api/rating/campaigns/create/",
        apis.CampaignCreateApi.as_view(),
        name="api_rating_campaign_create",
    ),
    path(
        "api/rating/campaigns/<int:campaign_id>/",
        apis.CampaignDetailApi.as_view(),
        name="api_rating_campaign",
    ),
    path(
        "api/rating/campaigns/<int:campaign_id>/close/",
        apis.CampaignCloseApi.as_view(),
        name="api_rating_campaign_close",
    ),
    path(
        "api/rating/campaigns/<int:campaign_id>/next-item/",
        apis.RatingNextItemApi.as_view(),
        name="api_rating_next_item",
    ),
    path(
        "api/rating/assignments/<int:assignment_id>/score/",
        apis.RatingSubmitApi.as_view(),
        name="api_rating_submit",
    ),
    path(
        "api/rating/campaigns/<int:campaign_id>/items/<str:blind_id>/plot/",
        apis.RatingItemPlotWindowApi.as_view(),
        name="api_rating_item_plot",
    ),
    path(
        "api/rating/campaigns/<int:campaign_id>/next-pair/",
        apis.PairNextApi.as_view(),
        name="api_rating_next_pair",
    ),
    path(
        "api/rating/pair-judgements/<int:judgement_id>/outcome/",
        apis.PairJudgementSubmitApi.as_view(),
        name="api_rating_pair_submit",
    ),
    path(
        "api/rating/campaigns/<int:campaign_id>/analysis/",
        apis.CampaignAnalysisApi.as_view(),
        name="api_rating_analysis",
    ),
    path(
        "api/rating/campaigns/<int:campaign_id>/analysis/<slug:figure>/",
        apis.CampaignAnalysisFigureApi.as_view(),
        name="api_rating_analysis_figure",
    ),
    path("api/rating/judges/", apis.JudgeListApi.as_view(), name="api_rating_judges"),
    path(
        "api/rating/judges/create/", apis.JudgeCreateApi.as_view(), name="api_rating_judge_create"
    ),
    path(
        "api/rating/campaigns/<int:campaign_id>/judges/<int:judge_id>/run/",
        apis.JudgeRunApi.as_view(),
        name="api_rating_judge_run",
    ),
]
