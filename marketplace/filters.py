"""django-filter pieces shared by the API's list endpoints."""

from datetime import UTC

import django_filters
from django import forms
from django_filters.fields import IsoDateTimeField


class UtcIsoDateTimeField(IsoDateTimeField):
    """An ISO 8601 datetime turned into UTC before it reaches the database.

    PostgreSQL refuses UTC offsets beyond +/-15:59 (ISO 8601 allows up to 23:59), and a date at
    the edge of the calendar can leave it once shifted: both are the caller's bad input (400),
    never a database error (500).
    """

    def to_python(self, value):
        value = super().to_python(value)
        if value is None or value.tzinfo is None:
            return value
        try:
            return value.astimezone(UTC)
        except OverflowError as exc:
            raise forms.ValidationError(
                "Enter a date and time within years 1 to 9999 in UTC.", code="invalid"
            ) from exc


class UtcIsoDateTimeFilter(django_filters.IsoDateTimeFilter):
    field_class = UtcIsoDateTimeField
