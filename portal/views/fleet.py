"""Fleet operator pages: fleets, sites and robots; the offers inbox; jobs.

Thin: reads go through fleets.selectors (scoped to the caller's organization, so another
operator's objects are a 404), writes through the same fleets.services as the REST fleet API,
whose refusals are shown next to the fields they name. The job page lists the job's episodes
and their QA from datasets.
"""

from decimal import Decimal

from django.contrib import messages
from django.core.paginator import Paginator
from django.http import Http404
from django.shortcuts import redirect
from django.utils import timezone
from django.views.decorators.http import require_POST

from fleets import selectors
from fleets.models import Job, Offer
from fleets.services import dispatch, registry
from marketplace.errors import NotFound, ServiceError
from portal.forms.fleet import FleetForm, OfferDeclineForm, RobotForm, SiteForm
from portal.shell import CAN_MANAGE_FLEETS, fleet_page, render_page
from portal.views.deliveries import job_episodes_section

RECENT_OFFERS = 20
JOBS_PER_PAGE = 25
SECONDS_PER_HOUR = Decimal(3600)


def _org(request):
    return request.caller.organization


def _get_or_404(queryset, pk):
    found = queryset.filter(pk=pk).first()
    if found is None:
        raise Http404("Not found.")
    return found


# --- Fleets ------------------------------------------------------------------------------------


@fleet_page()
def fleet_overview(request):
    fleets = selectors.fleet_overview(organization=_org(request))
    return render_page(
        request,
        "portal/fleet/fleet_overview.html",
        {"fleets": list(fleets), "can_manage": request.caller.has_role(*CAN_MANAGE_FLEETS)},
    )


@fleet_page(manage=True)
def fleet_new(request):
    form = FleetForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            fleet = registry.fleet_create(organization=_org(request), **form.to_fields())
        except ServiceError as exc:
            form.add_service_error(exc)
        else:
            messages.success(request, f"Fleet “{fleet.name}” registered. Add its sites next.")
            return redirect("fleet-detail-page", pk=fleet.pk)
    return render_page(request, "portal/fleet/fleet_form.html", {"form": form, "fleet": None})


@fleet_page()
def fleet_detail(request, pk):
    organization = _org(request)
    fleet = _get_or_404(selectors.fleets_for(organization=organization), pk)
    sites = selectors.fleet_sites(organization=organization, fleet=fleet)
    robots = selectors.robots_for(organization=organization).filter(fleet=fleet)
    return render_page(
        request,
        "portal/fleet/fleet_detail.html",
        {
            "fleet": fleet,
            "sites": list(sites),
            "robots": list(robots),
            "can_manage": request.caller.has_role(*CAN_MANAGE_FLEETS),
        },
    )


@fleet_page(manage=True)
def fleet_edit(request, pk):
    organization = _org(request)
    fleet = _get_or_404(selectors.fleets_for(organization=organization), pk)
    initial = {name: getattr(fleet, name) for name in registry.FLEET_EDITABLE}
    form = FleetForm(request.POST or None, initial=initial)
    if request.method == "POST" and form.is_valid():
        try:
            registry.fleet_update(
                organization=organization, fleet_id=fleet.pk, changes=form.to_fields()
            )
        except NotFound as exc:
            raise Http404(exc.message) from exc
        except ServiceError as exc:
            form.add_service_error(exc)
        else:
            messages.success(request, "Fleet saved.")
            return redirect("fleet-detail-page", pk=fleet.pk)
    return render_page(request, "portal/fleet/fleet_form.html", {"form": form, "fleet": fleet})


# --- Sites -------------------------------------------------------------------------------------


@fleet_page(manage=True)
def site_new(request, pk):
    organization = _org(request)
    fleet = _get_or_404(selectors.fleets_for(organization=organization), pk)
    form = SiteForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            site = registry.site_create(
                organization=organization, fleet_id=fleet.pk, **form.to_fields()
            )
        except NotFound as exc:
            raise Http404(exc.message) from exc
        except ServiceError as exc:
            form.add_service_error(exc)
        else:
            messages.success(request, f"Site “{site.name}” added.")
            return redirect("fleet-detail-page", pk=fleet.pk)
    return render_page(
        request, "portal/fleet/site_form.html", {"form": form, "fleet": fleet, "site": None}
    )


@fleet_page(manage=True)
def site_edit(request, pk):
    organization = _org(request)
    site = _get_or_404(selectors.sites_for(organization=organization), pk)
    initial = {
        "name": site.name,
        "kind": site.kind,
        "description": site.description,
        "objects_available": SiteForm.objects_text(site.objects_available),
        "active": site.active,
    }
    form = SiteForm(request.POST or None, initial=initial)
    if request.method == "POST" and form.is_valid():
        try:
            registry.site_update(
                organization=organization, site_id=site.pk, changes=form.to_fields()
            )
        except NotFound as exc:
            raise Http404(exc.message) from exc
        except ServiceError as exc:
            form.add_service_error(exc)
        else:
            messages.success(request, "Site saved.")
            return redirect("fleet-detail-page", pk=site.fleet_id)
    return render_page(
        request, "portal/fleet/site_form.html", {"form": form, "fleet": site.fleet, "site": site}
    )


# --- Robots ------------------------------------------------------------------------------------


@fleet_page(manage=True)
def robot_new(request, pk):
    organization = _org(request)
    fleet = _get_or_404(selectors.fleets_for(organization=organization), pk)
    sites = list(selectors.sites_for(organization=organization).filter(fleet=fleet))
    form = RobotForm(request.POST or None, sites=sites, initial={"site": request.GET.get("site")})
    if request.method == "POST" and form.is_valid():
        data = form.to_fields()
        try:
            robot = registry.robot_create(
                organization=organization,
                site_id=data.pop("site"),
                **data,
            )
        except ServiceError as exc:
            form.add_service_error(exc)
        else:
            messages.success(request, f"Robot “{robot.name}” added.")
            return redirect("fleet-detail-page", pk=fleet.pk)
    return render_page(
        request,
        "portal/fleet/robot_form.html",
        {"form": form, "fleet": fleet, "robot": None, "has_sites": bool(sites)},
    )


@fleet_page(manage=True)
def robot_edit(request, pk):
    organization = _org(request)
    robot = _get_or_404(selectors.robots_for(organization=organization), pk)
    sites = list(selectors.sites_for(organization=organization).filter(fleet_id=robot.fleet_id))
    initial = {
        "name": robot.name,
        "site": str(robot.site_id),
        "embodiment": robot.embodiment.slug,
        "end_effector": robot.end_effector,
        "sensors": list(robot.sensor_slugs),
        "active": robot.active,
    }
    form = RobotForm(request.POST or None, sites=sites, initial=initial)
    if request.method == "POST" and form.is_valid():
        try:
            registry.robot_update(
                organization=organization, robot_id=robot.pk, changes=form.to_fields()
            )
        except NotFound as exc:
            if exc.fields:
                form.add_service_error(exc)
            else:
                raise Http404(exc.message) from exc
        except ServiceError as exc:
            form.add_service_error(exc)
        else:
            messages.success(request, "Robot saved.")
            return redirect("fleet-detail-page", pk=robot.fleet_id)
    return render_page(
        request,
        "portal/fleet/robot_form.html",
        {"form": form, "fleet": robot.fleet, "robot": robot, "has_sites": True},
    )


# --- Offers ------------------------------------------------------------------------------------


def task_card(
    job: Job, fleet, now, committed: dict | None = None, offer: Offer | None = None
) -> dict:
    """What an operator needs to decide on a job and to do it: the pay (hours x the agreed
    rate), the success criterion, objects, notes, the streams to record, and what the job does
    to the fleet's capacity until its deadline. `offer`: the pending offer the card is for
    (its rate is the one accepting fixes; read from it, not queried per card)."""
    if offer is not None:
        rate, currency = offer.rate_per_hour, offer.currency
    else:
        rate, currency = selectors.job_pay_rate(job=job, fleet=fleet), fleet.currency
    order = job.order
    return {
        "rate": rate,
        "currency": currency,
        "pay": (job.target_seconds * rate / 3600).quantize(Decimal("0.01")),
        "success_criterion": order.success_criterion,
        "objects": list(job.site.objects_available) if job.site_id else [],
        "objects_per_environment": order.objects_per_environment,
        "notes": order.notes,
        "fps_note": "the order's first accepted episode fixes the frame rate",
        "action_dim": job.embodiment.action_dim,
        "capacity": selectors.fleet_capacity_impact(
            fleet=fleet, job=job, now=now, committed=committed
        ),
    }


@fleet_page()
def offer_list(request):
    offers = selectors.offers_for(organization=_org(request)).select_related(
        "fleet", "site", "job__order__task_type", "job__embodiment", "job__site"
    )
    now = timezone.now()
    pending = list(offers.filter(status=Offer.Status.PENDING).order_by("expires_at", "pk"))
    committed = selectors.committed_hours(fleet_ids={offer.fleet_id for offer in pending})
    for offer in pending:
        offer.card = task_card(offer.job, offer.fleet, now, committed, offer=offer)
    recent = list(offers.exclude(status=Offer.Status.PENDING)[:RECENT_OFFERS])
    return render_page(
        request,
        "portal/fleet/offer_list.html",
        {
            "pending": pending,
            "recent": recent,
            "now": now,
            "decline_form": OfferDeclineForm(),
            "can_manage": request.caller.has_role(*CAN_MANAGE_FLEETS),
        },
    )


@require_POST
@fleet_page(manage=True)
def offer_accept(request, pk):
    try:
        assignment = dispatch.offer_accept(organization=_org(request), offer_id=pk)
    except NotFound as exc:
        raise Http404(exc.message) from exc
    except ServiceError as exc:
        messages.error(request, f"Could not accept the offer: {exc.message}")
        return redirect("offer-list-page")
    messages.success(request, "Offer accepted: the job is yours. Start collecting.")
    return redirect("job-detail-page", pk=assignment.job_id)


@require_POST
@fleet_page(manage=True)
def offer_decline(request, pk):
    form = OfferDeclineForm(request.POST)
    if not form.is_valid():
        messages.error(request, "The reason is too long (2000 characters at most).")
        return redirect("offer-list-page")
    try:
        dispatch.offer_decline(
            organization=_org(request), offer_id=pk, reason=form.cleaned_data["reason"]
        )
    except NotFound as exc:
        raise Http404(exc.message) from exc
    except ServiceError as exc:
        messages.error(request, f"Could not decline the offer: {exc.message}")
    else:
        messages.success(request, "Offer declined. It goes to the next fleet.")
    return redirect("offer-list-page")


# --- Jobs --------------------------------------------------------------------------------------


def job_progress(job: Job) -> dict:
    """Numbers for the two bars: fleet-reported hours and QA-accepted hours vs the target."""
    target = job.target_hours or Decimal("0")
    accepted = (job.accepted_seconds / SECONDS_PER_HOUR).quantize(Decimal("0.01"))

    def percent(value: Decimal) -> int:
        return int(min(Decimal(100), value / target * 100)) if target > 0 else 0

    return {
        "target": target,
        "reported": job.progress_hours,
        "reported_percent": percent(job.progress_hours),
        "accepted": accepted,
        "accepted_percent": percent(accepted),
    }


@fleet_page()
def job_list(request):
    jobs = selectors.jobs_held_by(organization=_org(request)).select_related("fleet", "site")
    status = request.GET.get("status", "")
    if status in Job.Status.values:
        jobs = jobs.filter(status=status)
    else:
        status = ""
    page = Paginator(jobs, JOBS_PER_PAGE).get_page(request.GET.get("page"))
    return render_page(
        request,
        "portal/fleet/job_list.html",
        {
            "page": page,
            "jobs": [(job, job_progress(job)) for job in page.object_list],
            "status": status,
            "statuses": Job.Status.choices,
        },
    )


@fleet_page()
def job_detail(request, pk):
    organization = _org(request)
    job = _get_or_404(
        selectors.jobs_held_by(organization=organization).select_related("fleet", "site"), pk
    )
    events = selectors.job_events_visible_to(organization=organization, job=job)
    return render_page(
        request,
        "portal/fleet/job_detail.html",
        {
            "job": job,
            "progress": job_progress(job),
            "events": list(events),
            "card": task_card(job, job.fleet, timezone.now()) if job.fleet_id else None,
            "episodes_section": job_episodes_section(job),  # datasets: episodes and QA
        },
    )


@fleet_page()
def job_collect(request, pk):
    """How to collect this job: the fleet agent's command with the job filled in, and the
    same steps by hand (register, upload, complete), each with this job's id."""
    organization = _org(request)
    job = _get_or_404(
        selectors.jobs_held_by(organization=organization).select_related(
            "fleet", "site", "order", "embodiment"
        ),
        pk,
    )
    robots = list(
        selectors.robots_for(organization=organization).filter(site_id=job.site_id, active=True)
    )
    return render_page(
        request,
        "portal/fleet/job_collect.html",
        {
            "job": job,
            "robot": robots[0] if robots else None,
            "site_url": request.build_absolute_uri("/").rstrip("/"),
            "card": task_card(job, job.fleet, timezone.now()) if job.fleet_id else None,
        },
    )
