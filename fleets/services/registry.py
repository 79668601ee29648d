"""The fleet registry: fleets, their sites and robots (what dispatch matches jobs against)."""

import zoneinfo
from decimal import Decimal

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from fleets.currencies import fleet_pay_problems
from fleets.error_codes import ErrorCode
from fleets.models import EndEffector, Fleet, Robot, Site, SiteKind, new_webhook_secret
from fleets.services.collection import CONTROL, NAME_MAX, site_objects_sync
from marketplace import outbound_webhooks
from marketplace.errors import NotFound, ServiceError, invalid
from marketplace.models import Organization
from orders.models import Embodiment, SensorAddon


def validate_webhook_url(url: str) -> str:
    """Where a fleet's events go (the rules are marketplace.outbound_webhooks')."""
    return outbound_webhooks.validate_url(
        url, field_name="webhook_url", allow_insecure=settings.FLEETS_WEBHOOK_ALLOW_INSECURE
    )


def _validate_fleet_pay(fields: dict, fleet: Fleet | None) -> None:
    """A currency fleets can be paid in (ISO 4217) and a rate in range for it; a change of one
    is checked with the other as the fleet has it (fleets/currencies.py)."""
    if "currency" not in fields and "payout_rate_per_hour" not in fields:
        return
    currency = fields.get("currency", fleet.currency if fleet else "USD")
    rate = fields.get("payout_rate_per_hour", fleet.payout_rate_per_hour if fleet else None)
    problems = fleet_pay_problems(currency=currency, rate=rate)
    if "currency" in problems:
        raise invalid("currency", problems["currency"], ErrorCode.UNKNOWN_CURRENCY)
    if "payout_rate_per_hour" in problems:
        raise invalid(
            "payout_rate_per_hour", problems["payout_rate_per_hour"], ErrorCode.RATE_OUT_OF_RANGE
        )


def _validate_fleet_fields(fields: dict) -> dict:
    """Everything but the pay (_validate_fleet_pay, checked with the fleet locked)."""
    if "name" in fields and not str(fields["name"]).strip():
        raise invalid("name", "A name is required.")
    if "weekly_capacity_hours" in fields and Decimal(fields["weekly_capacity_hours"]) < 0:
        raise invalid("weekly_capacity_hours", "Must be zero or more.")
    if "timezone" in fields and fields["timezone"] not in zoneinfo.available_timezones():
        raise invalid("timezone", f"Unknown time zone {fields['timezone']!r}.")
    if "status" in fields and fields["status"] not in Fleet.Status.values:
        raise invalid("status", f"Unknown status {fields['status']!r}.")
    if "webhook_url" in fields:
        fields["webhook_url"] = validate_webhook_url(fields["webhook_url"] or "")
    return fields


FLEET_EDITABLE = (
    "name",
    "status",
    "timezone",
    "weekly_capacity_hours",
    "payout_rate_per_hour",
    "currency",
    "webhook_url",
)


def _require_fleet_operator(organization: Organization) -> None:
    if organization is None or not organization.is_fleet_operator:
        raise ServiceError("Only fleet operators have fleets.", code=ErrorCode.NOT_A_FLEET_OPERATOR)


def fleet_create(
    *,
    organization: Organization,
    name: str,
    weekly_capacity_hours: Decimal,
    payout_rate_per_hour: Decimal,
    timezone: str = "UTC",
    currency: str = "USD",
    webhook_url: str = "",
    status: str = Fleet.Status.ACTIVE,
) -> Fleet:
    _require_fleet_operator(organization)
    fields = _validate_fleet_fields(
        {
            "name": name,
            "weekly_capacity_hours": weekly_capacity_hours,
            "payout_rate_per_hour": payout_rate_per_hour,
            "timezone": timezone,
            "currency": currency,
            "webhook_url": webhook_url,
            "status": status,
        }
    )
    _validate_fleet_pay(fields, None)
    return Fleet.objects.create(organization=organization, **fields)


def _own_fleet_locked(*, organization: Organization, fleet_id) -> Fleet:
    fleet = Fleet.objects.select_for_update().filter(pk=fleet_id, organization=organization).first()
    if fleet is None:
        raise NotFound("Fleet not found.")
    return fleet


def fleet_update(*, organization: Organization, fleet_id, changes: dict) -> Fleet:
    unknown = set(changes) - set(FLEET_EDITABLE)
    if unknown:
        raise ServiceError(
            "These fields cannot be changed.", fields={k: ["Read-only."] for k in unknown}
        )
    fields = _validate_fleet_fields(dict(changes))
    with transaction.atomic():
        fleet = _own_fleet_locked(organization=organization, fleet_id=fleet_id)
        _validate_fleet_pay(fields, fleet)
        for name, value in fields.items():
            setattr(fleet, name, value)
        fleet.save()
    return fleet


def fleet_rotate_secret(*, organization: Organization, fleet_id) -> Fleet:
    with transaction.atomic():
        fleet = _own_fleet_locked(organization=organization, fleet_id=fleet_id)
        fleet.webhook_secret = new_webhook_secret()
        fleet.save(update_fields=["webhook_secret", "updated_at"])
    return fleet


def fleet_heartbeat(*, organization: Organization, fleet_id) -> Fleet:
    now = timezone.now()
    updated = Fleet.objects.filter(pk=fleet_id, organization=organization).update(
        last_heartbeat_at=now
    )
    if not updated:
        raise NotFound("Fleet not found.")
    return Fleet.objects.get(pk=fleet_id)


def _clean_objects(objects) -> list[str]:
    if not isinstance(objects, list) or not all(isinstance(o, str) for o in objects):
        raise invalid("objects_available", "A list of object names.")
    cleaned = sorted({o.strip() for o in objects if o.strip()})
    if len(cleaned) > 500:
        raise invalid("objects_available", "At most 500 objects.")
    if any(len(name) > NAME_MAX or CONTROL.search(name) for name in cleaned):
        raise invalid(
            "objects_available",
            f"Object names of at most {NAME_MAX} characters, without control characters.",
        )
    return cleaned


def site_create(
    *,
    organization: Organization,
    fleet_id,
    name: str,
    kind: str,
    description: str = "",
    objects_available: list | None = None,
    active: bool = True,
) -> Site:
    if kind not in SiteKind.values:
        raise invalid("kind", f"Unknown site kind {kind!r}.", ErrorCode.UNKNOWN_SITE_KIND)
    if not name.strip():
        raise invalid("name", "A name is required.")
    objects = _clean_objects(objects_available or [])
    fleet = Fleet.objects.filter(pk=fleet_id, organization=organization).first()
    if fleet is None:
        raise NotFound("Fleet not found.", fields={"fleet": ["Fleet not found."]})
    with transaction.atomic():
        site = Site.objects.create(
            fleet=fleet,
            name=name.strip(),
            kind=kind,
            description=description,
            objects_available=objects,
            active=active,
        )
        # the names become registered objects (fleets/services/collection.py)
        site_objects_sync(site=site, names=objects)
    return site


def site_update(*, organization: Organization, site_id, changes: dict) -> Site:
    allowed = {"name", "kind", "description", "objects_available", "active"}
    unknown = set(changes) - allowed
    if unknown:
        raise ServiceError(
            "These fields cannot be changed.", fields={k: ["Read-only."] for k in unknown}
        )
    if "kind" in changes and changes["kind"] not in SiteKind.values:
        raise invalid(
            "kind", f"Unknown site kind {changes['kind']!r}.", ErrorCode.UNKNOWN_SITE_KIND
        )
    if "objects_available" in changes:
        changes["objects_available"] = _clean_objects(changes["objects_available"])
    with transaction.atomic():
        site = (
            Site.objects.select_for_update()
            .filter(pk=site_id, fleet__organization=organization)
            .first()
        )
        if site is None:
            raise NotFound("Site not found.")
        for name, value in changes.items():
            setattr(site, name, value)
        site.save()
        if "objects_available" in changes:  # new names become registered objects; none deleted
            site_objects_sync(site=site, names=changes["objects_available"])
    return site


def _resolve_capabilities(*, embodiment: str | None, end_effector: str | None, sensors) -> dict:
    resolved: dict = {}
    if embodiment is not None:
        found = Embodiment.objects.filter(slug=embodiment, active=True).first()
        if found is None:
            raise invalid(
                "embodiment", f"Unknown embodiment {embodiment!r}.", ErrorCode.UNKNOWN_EMBODIMENT
            )
        resolved["embodiment"] = found
    if end_effector is not None:
        if end_effector not in EndEffector.values:
            raise invalid(
                "end_effector",
                f"Unknown end effector {end_effector!r}.",
                ErrorCode.UNKNOWN_END_EFFECTOR,
            )
        resolved["end_effector"] = end_effector
    if sensors is not None:
        wanted = sorted(set(sensors))
        known = set(
            SensorAddon.objects.filter(slug__in=wanted, active=True).values_list("slug", flat=True)
        )
        unknown = [s for s in wanted if s not in known]
        if unknown:
            raise invalid(
                "sensors", f"Unknown sensors: {', '.join(unknown)}.", ErrorCode.UNKNOWN_SENSOR
            )
        resolved["sensor_slugs"] = wanted
    return resolved


def robot_create(
    *,
    organization: Organization,
    site_id,
    name: str,
    embodiment: str,
    end_effector: str,
    sensors: list[str] | tuple = (),
    active: bool = True,
) -> Robot:
    if not name.strip():
        raise invalid("name", "A name is required.")
    capabilities = _resolve_capabilities(
        embodiment=embodiment, end_effector=end_effector, sensors=sensors
    )
    site = Site.objects.filter(pk=site_id, fleet__organization=organization).first()
    if site is None:
        raise NotFound("Site not found.", fields={"site": ["Site not found."]})
    return Robot.objects.create(
        fleet_id=site.fleet_id, site=site, name=name.strip(), active=active, **capabilities
    )


def robot_update(*, organization: Organization, robot_id, changes: dict) -> Robot:
    allowed = {"name", "embodiment", "end_effector", "sensors", "site", "active"}
    unknown = set(changes) - allowed
    if unknown:
        raise ServiceError(
            "These fields cannot be changed.", fields={k: ["Read-only."] for k in unknown}
        )
    capabilities = _resolve_capabilities(
        embodiment=changes.get("embodiment"),
        end_effector=changes.get("end_effector"),
        sensors=changes.get("sensors"),
    )
    with transaction.atomic():
        robot = (
            Robot.objects.select_for_update()
            .filter(pk=robot_id, fleet__organization=organization)
            .first()
        )
        if robot is None:
            raise NotFound("Robot not found.")
        if "site" in changes:
            site = Site.objects.filter(pk=changes["site"], fleet_id=robot.fleet_id).first()
            if site is None:
                raise NotFound("Site not found.", fields={"site": ["Site not found."]})
            robot.site = site
        for name, value in capabilities.items():
            setattr(robot, name, value)
        if "name" in changes:
            robot.name = changes["name"]
        if "active" in changes:
            robot.active = bool(changes["active"])
        robot.save()
    return robot
