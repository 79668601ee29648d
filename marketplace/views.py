"""Web pages for accounts: home, sign up, API keys. Thin: services do the writes."""

from functools import wraps

from django.contrib import messages
from django.contrib.auth import authenticate, login
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from marketplace import services
from marketplace.errors import ServiceError
from marketplace.forms import ApiKeyCreateForm, SignupForm
from marketplace.models import ApiKey, Membership
from marketplace.tenancy import caller_for_request
from orders.models import ComplexityLevel, TaskType

SHOWN_ONCE_SESSION_KEY = "api_key_shown_once"


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


def home(request):
    return render_page(
        request,
        "marketplace/home.html",
        {
            "levels": ComplexityLevel.objects.all(),
            "task_types": TaskType.objects.filter(active=True).select_related("default_complexity"),
        },
    )


def signup(request):
    if request.user.is_authenticated:
        return redirect("order-list-page")
    next_url = request.POST.get("next") or request.GET.get("next") or ""
    if not url_has_allowed_host_and_scheme(next_url, allowed_hosts={request.get_host()}):
        next_url = ""
    form = SignupForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            services.customer_signup(
                username=data["username"],
                email=data["email"],
                password=data["password1"],
                organization_name=data["organization_name"],
            )
        except ServiceError as exc:
            form.add_service_error(exc)
        else:
            user = authenticate(request, username=data["username"], password=data["password1"])
            login(request, user)
            messages.success(request, f"Welcome, {user.get_username()}. Your account is ready.")
            return redirect(next_url or reverse("order-list-page"))
    return render_page(request, "registration/signup.html", {"form": form, "next": next_url})


OWNER = (Membership.Role.OWNER,)


@organization_page(roles=OWNER)
def api_keys(request):
    caller = request.caller
    form = ApiKeyCreateForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            issued = services.api_key_create(
                organization=caller.organization,
                name=form.cleaned_data["name"],
                created_by=request.user,
                role=form.cleaned_data["role"],
            )
        except ServiceError as exc:
            form.add_service_error(exc)
        else:
            # Shown once: kept in the session only until the next page view reads it.
            request.session[SHOWN_ONCE_SESSION_KEY] = {
                "id": str(issued.api_key.id),
                "name": issued.api_key.name,
                "raw_key": issued.raw_key,
            }
            return redirect("api-keys")
    shown_once = request.session.pop(SHOWN_ONCE_SESSION_KEY, None)
    keys = ApiKey.objects.filter(organization=caller.organization).select_related("created_by")
    return render_page(
        request,
        "marketplace/api_keys.html",
        {"form": form, "keys": keys, "shown_once": shown_once},
    )


@require_POST
@organization_page(roles=OWNER)
def api_key_revoke(request, pk):
    api_key = get_object_or_404(ApiKey, pk=pk, organization=request.caller.organization)
    try:
        services.api_key_revoke(api_key=api_key)
    except ServiceError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, f"Key “{api_key.name}” ({api_key.prefix}…) is revoked.")
    return redirect("api-keys")
