from __future__ import annotations

from django.contrib import admin

from annotation.models import AuditLog, Spectrum, Task


@admin.register(Task)
class TaskAdmin(admin.ModelAdmin):
    list_display = ["code", "name", "builtin", "updated_at"]
    search_fields = ["code", "name"]
    readonly_fields = ["builtin"]


@admin.register(Spectrum)
class SpectrumAdmin(admin.ModelAdmin):
    list_display = ["id", "object_id", "survey", "dataset", "task", "label", "snr", "synthetic"]
    list_filter = ["survey", "dataset", "label", "synthetic", "task"]
    search_fields = ["object_id", "source_name"]
    exclude = ["arrays"]
    readonly_fields = ["content_hash", "n_pixels", "wavelength_min", "wavelength_max"]


@admin.register(AuditLog)
class AuditLogAdmin(admin.ModelAdmin):
    list_display = ["created_at", "actor", "action", "object_type", "object_pk", "to_state"]
    list_filter = ["action", "object_type"]

    def has_change_permission(self, request: object, obj: object = None) -> bool:
        return False

    def has_delete_permission(self, request: object, obj: object = None) -> bool:
        return False
