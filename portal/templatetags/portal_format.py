"""Template filters for what every page formats the same way: money, durations, QA reasons.

`{% load portal_format %}` then `{{ order.total|money:order.currency }}`,
`{{ rate|rate:fleet.currency }}`, `{{ seconds|duration }}`, `{{ code|qa_reason }}`.
"""

from decimal import Decimal

from django import template

from orders.money import format_money, format_rate
from portal.wording import (
    duration_text,
    exclusion_reason_text,
    humanize_seconds,
    qa_flag_text,
    qa_reason_text,
    readable_line,
)

register = template.Library()


@register.filter
def money(amount, currency):
    return format_money(amount, currency)


@register.filter
def rate(amount, currency):
    return format_rate(amount, currency)


@register.filter
def duration(seconds):
    """Seconds (Decimal, int) -> '1 h 31 min', '12 min', '45 s'."""
    if seconds in (None, ""):
        return ""
    return duration_text(Decimal(str(seconds)))


@register.filter
def hours_duration(hours):
    """Hours (Decimal) -> '1 h 31 min'."""
    if hours in (None, ""):
        return ""
    return duration_text(Decimal(str(hours)) * 3600)


@register.filter
def qa_reason(code):
    return qa_reason_text(code)


@register.filter
def qa_flag(code):
    return qa_flag_text(code)


@register.filter
def percent(fraction):
    """0.0421 -> '4 %'; None -> an en dash (as the tables show a missing value)."""
    if fraction in (None, ""):
        return "\u2013"
    return f"{round(float(fraction) * 100)} %"


@register.filter
def humanized(text):
    """Event reasons with raw seconds ('5496.002 s') read in hours and minutes."""
    return humanize_seconds(text)


@register.simple_tag
def line_text(line):
    """A price line's description with catalog names and formatted amounts."""
    from orders.models import Embodiment, SensorAddon

    names = dict(Embodiment.objects.values_list("slug", "name"))
    names.update(SensorAddon.objects.values_list("slug", "name"))
    return readable_line(line.get("description") or line.get("code", ""), names)


@register.filter
def exclusion_reason(code):
    """An exclusion's reason code in words."""
    return exclusion_reason_text(str(code))
