"""Operators' figures (issue 16): the fleet's own operators across orders (registered ones
and free-text pseudonyms), outliers named by the orders they stand out in."""

from datasets.operator_figures import fleet_operator_figures
from fleets.models import Operator
from portal.shell import fleet_page, render_page


@fleet_page()
def fleet_operators(request):
    organization = request.caller.organization
    operators = Operator.objects.filter(fleet__organization=organization).select_related(
        "fleet", "site"
    )
    return render_page(
        request,
        "portal/fleet/operators.html",
        {
            "operators": operators,
            "figures": fleet_operator_figures(organization=organization),
        },
    )
