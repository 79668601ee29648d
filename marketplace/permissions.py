"""DRF permission classes over the caller's organization kind and role."""

from rest_framework.permissions import SAFE_METHODS, BasePermission, IsAuthenticated

from marketplace.models import Membership
from marketplace.tenancy import caller_for_request
from marketplace.throttling import CallerRateThrottle


class IsCustomer(BasePermission):
    message = "This endpoint is for customer organizations."

    def has_permission(self, request, view) -> bool:
        return caller_for_request(request).is_customer


class IsFleetOperator(BasePermission):
    message = "This endpoint is for fleet-operator organizations."

    def has_permission(self, request, view) -> bool:
        return caller_for_request(request).is_fleet_operator


class IsOrganizationOwner(BasePermission):
    message = "Only an owner of the organization may do this."

    def has_permission(self, request, view) -> bool:
        caller = caller_for_request(request)
        return caller.organization is not None and caller.has_role(Membership.Role.OWNER)


class CanOrder(BasePermission):
    """Placing and cancelling orders is day-to-day work: owners and members, not billing-only."""

    message = "Your role in this organization cannot place or change orders."

    def has_permission(self, request, view) -> bool:
        if request.method in ("GET", "HEAD", "OPTIONS"):
            return True
        return caller_for_request(request).has_role(Membership.Role.OWNER, Membership.Role.MEMBER)


class CanOperate(BasePermission):
    """Reading is for every role; changing fleets and taking work is for owners and members."""

    message = "Your role in this organization cannot change fleets or take work."

    def has_permission(self, request, view) -> bool:
        if request.method in SAFE_METHODS:
            return True
        return caller_for_request(request).has_role(Membership.Role.OWNER, Membership.Role.MEMBER)


class FleetOperatorApi:
    """Mixin of every fleet-facing API view (fleets' registry and dispatch, datasets' episodes):
    fleet operators only, changes by owners and members, throttled per caller."""

    permission_classes = [IsAuthenticated, IsFleetOperator, CanOperate]
    throttle_classes = [CallerRateThrottle]

    @property
    def organization(self):
        return caller_for_request(self.request).organization
