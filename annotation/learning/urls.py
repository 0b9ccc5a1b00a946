from __future__ import annotations

from django.urls import path

from annotation.learning import apis, views

urlpatterns = [
    path("catalog/calibration/", views.calibration, name="calibration"),
    path("catalog/calibration/refit/", views.calibration_refit, name="calibration_refit"),
    path("catalog/calibration/target/", views.triage_target, name="triage_target"),
    path("catalog/calibration/audits/", views.audit_draw, name="audit_draw"),
    path(
        "catalog/calibration/audits/<int:sample_id>/close/", views.audit_close, name="audit_close"
    ),
    path("vetting/gold/", views.gold, name="gold"),
    path("vetting/gold/mark/", views.gold_mark, name="gold_mark"),
    path("vetting/gold/<int:gold_id>/retire/", views.gold_retire, name="gold_retire"),
    # API
    path(
        "api/calibration/refit/", apis.CalibrationRefitApi.as_view(), name="api_calibration_refit"
    ),
    path("api/calibration/target/", apis.TriageTargetSetApi.as_view(), name="api_triage_target"),
    path(
        "api/calibration/audits/",
        apis.AuditSampleCreateApi.as_view(),
        name="api_audit_sample_create",
    ),
    path(
        "api/calibration/<str:task_code>/",
        apis.CalibrationDetailApi.as_view(),
        name="api_calibration_detail",
    ),
    path("api/vetting/gold/", apis.GoldItemCreateApi.as_view(), name="api_gold_item_create"),
    path("api/vetting/gold/accuracy/", apis.GoldAccuracyApi.as_view(), name="api_gold_accuracy"),
]
