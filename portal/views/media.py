"""An accepted episode as the customer sees it: a poster frame per camera, each camera's clip
(a fresh audited link per play) and a plot of state and action over time."""

from django.http import Http404, HttpResponse, HttpResponseRedirect
from django.utils.safestring import mark_safe
from django.views.decorators.http import require_GET

from datasets import storage
from datasets.services import episode_media
from marketplace.client_address import client_address
from marketplace.errors import NotFound
from marketplace.models import Organization
from portal.shell import organization_page, render_page

CUSTOMER = Organization.Kind.CUSTOMER


def _episode(request, pk, episode_pk):
    try:
        return episode_media.customer_episode(
            organization=request.caller.organization, order_id=pk, episode_id=episode_pk
        )
    except NotFound as exc:
        raise Http404(exc.message) from exc


@require_GET
@organization_page(kind=CUSTOMER)
def episode_detail(request, pk, episode_pk):
    episode = _episode(request, pk, episode_pk)
    try:
        # the SVG is built from numbers and html.escape()d names only
        plot = mark_safe(episode_media.episode_plot_svg(episode=episode))  # noqa: S308
    except (storage.StorageError, OSError, ValueError, KeyError):
        plot = None  # the page still shows the cameras; the plot says it is unavailable
    return render_page(
        request,
        "portal/media/episode_detail.html",
        {
            "order": episode.order,
            "episode": episode,
            "videos": episode_media.episode_videos(episode),
            "plot": plot,
        },
    )


@require_GET
@organization_page(kind=CUSTOMER)
def episode_poster(request, pk, episode_pk, camera_key):
    episode = _episode(request, pk, episode_pk)
    try:
        jpeg = episode_media.episode_poster(episode=episode, camera_key=camera_key)
    except NotFound as exc:
        raise Http404(exc.message) from exc
    response = HttpResponse(jpeg, content_type="image/jpeg")
    response["Cache-Control"] = "private, max-age=300"
    return response


@require_GET
@organization_page(kind=CUSTOMER)
def episode_clip(request, pk, episode_pk, camera_key):
    episode = _episode(request, pk, episode_pk)
    try:
        link = episode_media.episode_clip_link(
            caller=request.caller,
            episode=episode,
            camera_key=camera_key,
            ip_address=client_address(request),
            user_agent=request.headers.get("User-Agent", ""),
        )
    except NotFound as exc:
        raise Http404(exc.message) from exc
    response = HttpResponseRedirect(link.url)
    response["Cache-Control"] = "no-store"
    return response
