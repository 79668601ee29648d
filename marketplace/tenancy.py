"""Who is calling, for which organization. Every queryset is scoped through this."""

import uuid
from dataclasses import dataclass

from rest_framework import exceptions

from marketplace.authentication import ApiKeyUser
from marketplace.models import ApiKey, Membership, Organization, User


@dataclass(frozen=True)
class Caller:
    organization: Organization | None
    role: str | None
    user: User | None = None
    api_key: ApiKey | None = None

    @property
    def is_customer(self) -> bool:
        return self.organization is not None and self.organization.is_customer

    @property
    def is_fleet_operator(self) -> bool:
        return self.organization is not None and self.organization.is_fleet_operator

    def has_role(self, *roles: str) -> bool:
        return self.role in roles


ANONYMOUS = Caller(organization=None, role=None)


def caller_for_request(request) -> Caller:
    """The caller's organization: the API key's, or the signed-in user's first membership.

    A person in several organizations picks one with the `X-Organization` header (its id);
    asking for an organization one is not a member of is answered as if it did not exist.
    """
    cached = getattr(request, "_marketplace_caller", None)
    if cached is not None:
        return cached
    user = request.user
    if isinstance(user, ApiKeyUser):
        api_key = user.api_key
        caller = Caller(organization=api_key.organization, role=api_key.role, api_key=api_key)
    elif user is not None and user.is_authenticated:
        memberships = Membership.objects.select_related("organization").filter(user=user)
        wanted = request.headers.get("X-Organization") or request.session.get("organization_id")
        if wanted:
            try:
                membership = memberships.filter(organization_id=uuid.UUID(str(wanted))).first()
            except ValueError as exc:
                raise exceptions.NotFound("Organization not found.") from exc
            if membership is None and request.headers.get("X-Organization"):
                raise exceptions.NotFound("Organization not found.")
        else:
            membership = None
        membership = membership or memberships.first()
        caller = Caller(
            organization=membership.organization if membership else None,
            role=membership.role if membership else None,
            user=user,
        )
    else:
        caller = ANONYMOUS
    request._marketplace_caller = caller
    return caller
