"""The error codes orders answers (see marketplace/error_codes.py)."""

from django.db import models

from marketplace.error_codes import register


@register
class ErrorCode(models.TextChoices):
    INVALID_TRANSITION = "invalid_transition", "The order's status does not allow this move."
    NO_RATE_CARD = "no_rate_card", "No rate card is in force; quotes are unavailable."
    NOT_A_CUSTOMER = "not_a_customer", "Only customer organizations can do this."
    NOT_COVERABLE = (
        "not_coverable",
        "The platform's fleets cannot cover the order now; place it with waitlist: true.",
    )
    NOT_WAITLISTED = "not_waitlisted", "The order is not waitlisted."
    NOT_PRICED = "not_priced", "The rate card has no price for this request."
    QUOTE_EXPIRED = "quote_expired", "The quote has expired; ask for a new one."
    QUOTE_USED = "quote_used", "An order was already placed from this quote."
    UNKNOWN_COMPLEXITY = "unknown_complexity", "No complexity level has this number."
    UNKNOWN_EMBODIMENT = "unknown_embodiment", "No active embodiment has this slug."
    UNKNOWN_SENSOR = "unknown_sensor", "A sensor add-on is not in the catalog."
    UNKNOWN_STATUS = "unknown_status", "No such status."
    UNKNOWN_TASK_TYPE = "unknown_task_type", "No active task type has this slug."
