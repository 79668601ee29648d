"""What every page shares: who may open it, and rendering with the caller for the navigation.

`organization_page` guards customer and account pages, `fleet_page` (the same guard for
fleet operators) the fleet portal; both put the caller (organization and role) on
`request.caller`. `render_page` is `render()` plus that caller, which portal/base.html needs
for its navigation.
"""

from functools import wraps

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.shortcuts import render

from marketplace.models import Membership, Organization
from marketplace.tenancy import caller_for_request

# Roles the pages ask for (the same as the API's): place and cancel orders, review pilots;
# change fleets, sites and robots and answer offers.
CAN_ORDER = (Membership.Role.OWNER, Membership.Role.MEMBER)
CAN_MANAGE_FLEETS = (Membership.Role.OWNER, Membership.Role.MEMBER)
WRONG_KIND = {
    Organization.Kind.CUSTOMER: "These pages are for customer organizations.",
    Organization.Kind.FLEET_OPERATOR: "These pages are for fleet operator organizations.",
}


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
                raise PermissionDenied(WRONG_KIND[kind])
            if roles and not caller.has_role(*roles):
                raise PermissionDenied("Your role in this organization does not allow this.")
            request.caller = caller
            return view(request, *args, **kwargs)

        return wrapped

    return decorator


def fleet_page(*, manage: bool = False):
    """The fleet portal's pages: members of a fleet-operator organization (owners and members
    to change anything); customers get the 403 page saying why."""
    return organization_page(
        kind=Organization.Kind.FLEET_OPERATOR, roles=CAN_MANAGE_FLEETS if manage else ()
    )


def confirmed(request) -> bool:
    """An irreversible action was confirmed (the dialog, or the confirmation page)."""
    return request.POST.get("confirmed") == "yes"


def confirm_page(request, *, title: str, message: str, button: str, back_url: str, fields=()):
    """Ask again on a page of its own (scripts off, or a direct POST): the same form, with
    the confirmation; the safe choice comes first."""
    return render_page(
        request,
        "portal/confirm.html",
        {
            "title": title,
            "message": message,
            "button": button,
            "back_url": back_url,
            "action": request.path,
            "fields": [(name, value) for name, value in fields],
        },
    )


def staff_page(view):
    """Staff only (Django's is_staff): others get the login page or a 403 saying why."""

    @wraps(view)
    @login_required
    def wrapped(request, *args, **kwargs):
        if not request.user.is_staff:
            raise PermissionDenied("These pages are for the platform's staff.")
        return view(request, *args, **kwargs)

    return wrapped
