"""A site's objects and scenes, a robot's camera calibrations (issue 30): what a fleet can
offer an order's collection plan. Thin: reads scoped to the caller's organization (another
operator's site or robot is a 404), writes through fleets.services.collection, the same
services as the fleet API, whose refusals are shown next to the fields they name."""

from datetime import timedelta

from django.conf import settings
from django.contrib import messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404
from django.shortcuts import redirect
from django.utils import timezone

from fleets import collection_selectors, selectors
from fleets.services import collection
from marketplace.errors import ServiceError
from portal.forms.fleet_collection import SceneForm, SiteObjectForm
from portal.shell import CAN_MANAGE_FLEETS, fleet_page, render_page

CALIBRATIONS_SHOWN = 100  # the newest; the API lists them all (GET calibrations?robot=)


def _own(queryset, pk):
    found = queryset.filter(pk=pk).first()
    if found is None:
        raise Http404("Not found.")
    return found


def _add(request, form, create, site, what: str) -> bool:
    """Run `create` with the form's fields; a refusal goes next to its field."""
    if not form.is_valid():
        return False
    try:
        made = create(organization=request.caller.organization, site_id=site.pk, **form.to_fields())
    except ServiceError as exc:
        form.add_service_error(exc)
        return False
    messages.success(request, f"{what} “{made.name}” added.")
    return True


def _set_active(request, site, action: str) -> None:
    """Deactivate (or reactivate) one of this site's objects or scenes."""
    organization = request.caller.organization
    if action == "object_active":
        rows, update, key = (
            collection_selectors.site_objects_for(organization=organization),
            collection.site_object_update,
            "object_id",
        )
    else:
        rows, update, key = (
            collection_selectors.scenes_for(organization=organization),
            collection.scene_update,
            "scene_id",
        )
    try:
        row = rows.filter(site=site, pk=request.POST.get("id") or None).first()
    except ValidationError:  # not an id
        row = None
    if row is None:
        raise Http404("Not found.")
    active = request.POST.get("active") == "1"
    update(organization=organization, changes={"active": active}, **{key: row.pk})
    state = "active again" if active else "deactivated"
    messages.success(request, f"“{row.name}” {state}.")


@fleet_page()
def site_collection(request, pk):
    organization = request.caller.organization
    site = _own(selectors.sites_for(organization=organization).select_related("fleet"), pk)
    can_manage = request.caller.has_role(*CAN_MANAGE_FLEETS)
    object_form = SiteObjectForm(prefix="object")
    scene_form = SceneForm(prefix="scene")
    if request.method == "POST":
        if not can_manage:
            raise PermissionDenied("Your role in this organization does not allow this.")
        action = request.POST.get("action")
        if action == "add_object":
            object_form = SiteObjectForm(request.POST, prefix="object")
            if _add(request, object_form, collection.site_object_create, site, "Object"):
                return redirect("site-collection-page", pk=site.pk)
        elif action == "add_scene":
            scene_form = SceneForm(request.POST, prefix="scene")
            if _add(request, scene_form, collection.scene_create, site, "Scene"):
                return redirect("site-collection-page", pk=site.pk)
        elif action in ("object_active", "scene_active"):
            _set_active(request, site, action)
            return redirect("site-collection-page", pk=site.pk)
        else:
            messages.error(request, "Unknown action.")
            return redirect("site-collection-page", pk=site.pk)
    return render_page(
        request,
        "portal/fleet/site_collection.html",
        {
            "site": site,
            "fleet": site.fleet,
            "objects": list(
                collection_selectors.site_objects_for(organization=organization).filter(site=site)
            ),
            "scenes": list(
                collection_selectors.scenes_for(organization=organization)
                .filter(site=site)
                .order_by("-active", "name")
            ),
            "object_form": object_form,
            "scene_form": scene_form,
            "can_manage": can_manage,
        },
    )


@fleet_page()
def robot_calibrations(request, pk):
    """Read-only: calibrations arrive through the API and the fleet agent (never edited)."""
    organization = request.caller.organization
    robot = _own(
        selectors.robots_for(organization=organization).select_related("fleet", "site"), pk
    )
    now = timezone.now()
    max_age = timedelta(days=settings.CALIBRATION_MAX_AGE_DAYS)
    calibrations = collection_selectors.calibrations_for(organization=organization).filter(
        robot=robot
    )
    newest = list(calibrations.order_by("-calibrated_at", "-created_at")[: CALIBRATIONS_SHOWN + 1])
    in_force = set(
        collection_selectors.calibrations_in_force(robot_id=robot.pk, at=now).values_list(
            "pk", flat=True
        )
    )
    rows = sorted(newest[:CALIBRATIONS_SHOWN], key=lambda row: row.camera)  # stable: by date
    for row in rows:
        row.age = now - row.calibrated_at
        row.pending = row.calibrated_at > now  # dated a few minutes ahead (clock drift)
        row.in_force = row.pk in in_force
        row.too_old = row.age > max_age
    return render_page(
        request,
        "portal/fleet/robot_calibrations.html",
        {
            "robot": robot,
            "fleet": robot.fleet,
            "calibrations": rows,
            "more": len(newest) > CALIBRATIONS_SHOWN,
            "shown": CALIBRATIONS_SHOWN,
            "max_age_days": settings.CALIBRATION_MAX_AGE_DAYS,
        },
    )
