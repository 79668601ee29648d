"""Template context for every page: portal links that later apps add to the navigation."""

from django.conf import settings
from django.urls import reverse


def portal_links(request) -> dict:
    """FLEET_PORTAL_LINKS: pages other apps add to the fleet portal (billing's earnings), named
    in settings so that neither marketplace nor fleets imports them."""
    links = []
    for link in getattr(settings, "FLEET_PORTAL_LINKS", []):
        url = reverse(link["url_name"])
        links.append(
            {
                "label": link["label"],
                "description": link.get("description", ""),
                "url": url,
                "current": request.path.startswith(url),
            }
        )
    return {"fleet_portal_links": links}
