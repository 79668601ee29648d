"""Operators (issue 16): a fleet registers the people who teleoperate its robots by
pseudonym; episodes name one. Until a fleet registers any, episodes keep a free-text
pseudonym (the reference agent and fleets that never adopted the registry keep working);
from its first registered operator on, an episode naming an unknown one is refused."""

import re

from django.db import IntegrityError, transaction

from fleets.models import Fleet, Operator, Site
from marketplace.errors import NotFound, invalid
from marketplace.models import Organization

PSEUDONYM = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
EDITABLE = {"pseudonym", "site_id", "skill_notes", "active"}


def _checked_pseudonym(pseudonym: str) -> str:
    if not PSEUDONYM.match(pseudonym or ""):
        raise invalid(
            "pseudonym",
            "A pseudonym of 1-64 letters, digits, '.', '_' or '-' (no spaces: never a name).",
        )
    return pseudonym


def _site_of(fleet: Fleet, site_id) -> Site | None:
    if site_id is None:
        return None
    site = Site.objects.filter(pk=site_id, fleet=fleet).first()
    if site is None:
        raise invalid("site", "Not a site of this fleet.")
    return site


def operator_create(
    *,
    organization: Organization,
    fleet_id,
    pseudonym: str,
    site_id=None,
    skill_notes: str = "",
    active: bool = True,
) -> Operator:
    fleet = Fleet.objects.filter(pk=fleet_id, organization=organization).first()
    if fleet is None:
        raise NotFound("Fleet not found.", fields={"fleet": ["Fleet not found."]})
    try:
        with transaction.atomic():
            return Operator.objects.create(
                fleet=fleet,
                pseudonym=_checked_pseudonym(pseudonym),
                site=_site_of(fleet, site_id),
                skill_notes=skill_notes,
                active=active,
            )
    except IntegrityError:
        raise invalid(
            "pseudonym", "This fleet already has an operator with this pseudonym."
        ) from None


def operator_update(*, organization: Organization, operator_id, changes: dict) -> Operator:
    unknown = set(changes) - EDITABLE
    if unknown:
        raise invalid(sorted(unknown)[0], "This field cannot be changed.")
    try:
        with transaction.atomic():
            operator = (
                Operator.objects.select_for_update()
                .select_related("fleet")
                .filter(pk=operator_id, fleet__organization=organization)
                .first()
            )
            if operator is None:
                raise NotFound("Operator not found.")
            if "pseudonym" in changes:
                operator.pseudonym = _checked_pseudonym(changes["pseudonym"])
            if "site_id" in changes:
                operator.site = _site_of(operator.fleet, changes["site_id"])
            for name in ("skill_notes", "active"):
                if name in changes:
                    setattr(operator, name, changes[name])
            operator.save()
    except IntegrityError:
        raise invalid(
            "pseudonym", "This fleet already has an operator with this pseudonym."
        ) from None
    return operator


def operator_for_episode(*, fleet_id, pseudonym: str) -> Operator | None:
    """The registered operator an episode names; None for a fleet that registered none (its
    episodes keep the free-text pseudonym). Unknown or inactive once the fleet has some: 400."""
    operators = Operator.objects.filter(fleet_id=fleet_id)
    found = operators.filter(pseudonym=pseudonym).first()
    if found is not None and found.active:
        return found
    if found is None and not operators.exists():
        return None
    raise invalid(
        "operator",
        f"{pseudonym!r} is not an active registered operator of this fleet (register it with"
        " POST /api/v1/fleet/operators).",
    )
