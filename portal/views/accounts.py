"""Account pages: home, sign up, API keys. Thin: marketplace.services does the writes."""

from django.contrib import messages
from django.contrib.auth import authenticate, login
from django.shortcuts import get_object_or_404, redirect
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from datasets import selectors as dataset_selectors
from fleets import selectors as fleet_selectors
from marketplace import services
from marketplace.errors import ServiceError
from marketplace.models import ApiKey, Membership, Organization
from marketplace.tenancy import caller_for_request
from orders.models import ComplexityLevel, Order, TaskType
from orders.selectors import order_list
from portal.forms.accounts import ApiKeyCreateForm, SignupForm
from portal.shell import confirm_page, confirmed, organization_page, render_page

ACTIVE_ORDER = (Order.Status.PAID, Order.Status.IN_COLLECTION, Order.Status.IN_REVIEW)

SHOWN_ONCE_SESSION_KEY = "api_key_shown_once"


def home(request):
    """The marketing page for visitors; signed-in people land on their dashboard."""
    if request.user.is_authenticated:
        return dashboard(request)
    return render_page(
        request,
        "portal/accounts/home.html",
        {
            "levels": ComplexityLevel.objects.all(),
            "task_types": TaskType.objects.filter(active=True).select_related("default_complexity"),
        },
    )


def dashboard(request):
    caller = caller_for_request(request)
    context: dict = {"caller": caller}
    organization = caller.organization
    if organization is not None and organization.kind == Organization.Kind.CUSTOMER:
        orders = list(order_list(organization=organization)[:100])
        context.update(
            {
                "active_orders": [o for o in orders if o.status in ACTIVE_ORDER][:10],
                "awaiting_payment": [
                    o for o in orders if o.status == Order.Status.AWAITING_PAYMENT
                ][:10],
                "ready": [
                    d
                    for d in dataset_selectors.deliveries_of(organization=organization)
                    .filter(status="ready", revoked_at__isnull=True)
                    .select_related("order")[:10]
                ],
                "order_count": len(orders),
            }
        )
    elif organization is not None:
        offers = fleet_selectors.offers_for(organization=organization)
        context.update(
            {
                "pending_offers": offers.filter(status="pending").count(),
                "jobs": list(
                    fleet_selectors.jobs_held_by(organization=organization)
                    .filter(status__in=("assigned", "in_progress"))
                    .select_related("order__task_type", "site")[:10]
                ),
                "fleet_count": fleet_selectors.fleets_for(organization=organization).count(),
            }
        )
    return render_page(request, "portal/accounts/dashboard.html", context)


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


def operator_signup(request):
    """Fleet operators sign up too: a person and their fleet-operator organization."""
    if request.user.is_authenticated:
        return redirect("home")
    form = SignupForm(request.POST or None)
    form.fields["organization_name"].help_text = "Your company or lab that runs the robots."
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            services.operator_signup(
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
            messages.success(
                request, f"Welcome, {user.get_username()}. Register your first fleet next."
            )
            return redirect("fleet-overview-page")
    return render_page(request, "registration/signup.html", {"form": form, "operator": True})


OWNER = (Membership.Role.OWNER,)


@never_cache  # shows a new key's secret once: no browser or proxy may keep a copy
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
        "portal/accounts/api_keys.html",
        {"form": form, "keys": keys, "shown_once": shown_once},
    )


@require_POST
@organization_page(roles=OWNER)
def api_key_revoke(request, pk):
    api_key = get_object_or_404(ApiKey, pk=pk, organization=request.caller.organization)
    if not confirmed(request):
        return confirm_page(
            request,
            title=f"Revoke the key “{api_key.name}”?",
            message=(
                f"Programs using mk_{api_key.prefix}_… stop working at once. This cannot be "
                "undone: a new key would have to be created and given to them."
            ),
            button="Revoke key",
            back_url=reverse("api-keys"),
        )
    try:
        services.api_key_revoke(api_key=api_key)
    except ServiceError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, f"Key “{api_key.name}” ({api_key.prefix}…) is revoked.")
    return redirect("api-keys")
