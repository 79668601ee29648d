"""What every page shares: who may open it, and rendering with the caller for the navigation.

`organization_page` guards customer and account pages, `fleet_page` the fleet portal; both put
the caller (organization and role) on `request.caller`. `render_page` is `render()` plus that
caller, which portal/base.html needs for its navigation.
"""

from functools import wraps

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.shortcuts import render

from marketplace.models import Membership
from marketplace.tenancy import caller_for_request

CAN_MANAGE_FLEETS = (Membership.Role.OWNER, Membership.Role.MEMBER)


def render_page(request, template: str, context: dict | None = None, status: int = 200):
    """render(), plus the caller (organization and role) that the navigation needs."""
    context = dict(context or {})
    if request.user.is_authenticated:
        context.setdefault("caller", caller_for_request(request))
    return render(request, template, context, status=status)


def organization_page(*, kind: str | None = None, roles: tuple[str, ...] = ()):
    """Signed-in users of an organization (of `kind`, with one of `roles`) only.

    Anonymous visitors go to the login page; others get a 403 page that says why.
    The caller is put on `request.caller`.
    """

    def decorator(view):
        @wraps(view)
        @login_required
        def wrapped(request, *args, **kwargs):
            caller = caller_for_request(request)
            if caller.organization is None:
                raise PermissionDenied("Your account does not belong to an organization yet.")
            if kind is not None and caller.organization.kind != kind:
                raise PermissionDenied("These pages are for customer organizations.")
            if roles and not caller.has_role(*roles):
                raise PermissionDenied("Your role in this organization does not allow this.")
            request.caller = caller
            return view(request, *args, **kwargs)

        return wrapped

    return decorator


def fleet_page(*, manage: bool = False):
    """Signed-in members of a fleet-operator organization only (owners/members to change).

    Anonymous visitors go to the login page; customers get the 403 page saying why.
    """

    def decorator(view):
        @wraps(view)
        @login_required
        def wrapped(request, *args, **kwargs):
            caller = caller_for_request(request)
            if caller.organization is None:
                raise PermissionDenied("Your account does not belong to an organization yet.")
            if not caller.is_fleet_operator:
                raise PermissionDenied("These pages are for fleet operator organizations.")
            if manage and not caller.has_role(*CAN_MANAGE_FLEETS):
                raise PermissionDenied("Your role in this organization does not allow this.")
            request.caller = caller
            return view(request, *args, **kwargs)

        return wrapped

    return decorator
