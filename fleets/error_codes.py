"""The error codes fleets answers (see marketplace/error_codes.py)."""

from django.db import models

from marketplace.error_codes import register


@register
class ErrorCode(models.TextChoices):
    BID_ABOVE_PRICE = "bid_above_price", "A bid above what the customer pays per hour."
    BID_CURRENCY = "bid_currency", "The fleet is paid in another currency than the order."
    BID_EXISTS = "bid_exists", "The fleet already has an open bid on this job."
    INVALID_JOB_TRANSITION = "invalid_job_transition", "The job's status does not allow this move."
    INVALID_CALIBRATION = (
        "invalid_calibration",
        "A camera calibration that no real camera has (resolution, focal lengths, principal"
        " point, distortion coefficient count, non-finite numbers, extrinsics not a rigid 4x4).",
    )
    JOB_NOT_OFFERED = "job_not_offered", "The job is no longer on offer."
    NAME_TAKEN = (
        "name_taken",
        "The site already has an object or a scene of this name (names are unique in a site).",
    )
    NOT_A_FLEET_OPERATOR = "not_a_fleet_operator", "Only fleet-operator organizations can do this."
    NOT_ELIGIBLE = (
        "not_eligible",
        "The site is not eligible for the job (capabilities, diversity, capacity).",
    )
    OFFER_EXPIRED = "offer_expired", "The offer has expired."
    OFFER_NOT_PENDING = "offer_not_pending", "The offer was already answered, expired or withdrawn."
    PAY_ABOVE_PRICE = (
        "pay_above_price",
        "A rate above what the job pays per hour (the order's price; a re-collection: the"
        " original agreed rate).",
    )
    PAY_CURRENCY = "pay_currency", "The fleet is paid in another currency than the job's order."
    RATE_OUT_OF_RANGE = "rate_out_of_range", "A fleet's rate outside the allowed range."
    UNKNOWN_CURRENCY = (
        "unknown_currency",
        "Not an ISO 4217 currency code (upper case; metals, funds and test codes refused).",
    )
    UNKNOWN_EMBODIMENT = "unknown_embodiment", "No active embodiment has this slug."
    UNKNOWN_END_EFFECTOR = "unknown_end_effector", "No such end effector."
    UNKNOWN_SENSOR = "unknown_sensor", "A sensor add-on is not in the catalog."
    UNKNOWN_SITE_KIND = "unknown_site_kind", "No such site kind."
