"""Pieces every billing admin shares: read-only admins (staff act through actions) and CSV."""

import csv
from decimal import Decimal

from django.contrib import admin
from django.http import HttpResponse
from django.urls import path
from django.utils import timezone

# A cell starting with one of these is a formula to a spreadsheet (CSV injection, OWASP).
FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value) -> str:
    """A value as a CSV cell a spreadsheet shows and never evaluates: numbers as they are,
    text that would start a formula behind a leading apostrophe."""
    if value is None:
        return ""
    if isinstance(value, int | float | Decimal) and not isinstance(value, bool):
        return str(value)
    text = str(value)
    return f"'{text}" if text.startswith(FORMULA_PREFIXES) else text


def export_csv(filename: str, header: list[str], rows) -> HttpResponse:
    response = HttpResponse(content_type="text/csv")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    writer = csv.writer(response)
    writer.writerow([csv_cell(name) for name in header])
    for row in rows:
        writer.writerow([csv_cell(value) for value in row])
    return response


class CsvExportMixin:
    """CSV of the selected rows (an admin action calls `csv_response`) and of all rows
    (the `export/` admin URL named `csv_url_name`), the columns named in `csv_fields`."""

    csv_filename: str
    csv_header: list[str]
    csv_fields: tuple[str, ...]
    csv_url_name: str

    def csv_response(self, queryset) -> HttpResponse:
        rows = queryset.values_list(*self.csv_fields).order_by("created_at", "id")
        stamp = timezone.now().strftime("%Y%m%d-%H%M%S")
        return export_csv(f"{self.csv_filename}-{stamp}.csv", self.csv_header, rows)

    def export_all_view(self, request):
        return self.csv_response(self.model.objects.all())

    def csv_urls(self) -> list:
        return [
            path(
                "export/", self.admin_site.admin_view(self.export_all_view), name=self.csv_url_name
            )
        ]


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class StaffActionsReadOnlyAdmin(ReadOnlyAdmin):
    """Read-only too, but staff get the changelist's actions (Django asks for "change" to
    show them); every field stays read-only."""

    def has_change_permission(self, request, obj=None):
        return request.user.is_active and request.user.is_staff
