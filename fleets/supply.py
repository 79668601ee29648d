"""The supply check (issue 30): can the platform's active fleets cover a plan, and by when.

Registered with orders' hook (`orders/supply.py`) in `fleets/apps.py`; the quote code asks it
before the customer pays. Read-only; the same eligibility as dispatch (fleets/selectors.py):

- a matching site: an active site of an active fleet, of a kind the task's category accepts
  (`planning.CATEGORY_SITE_KINDS`), with an active robot of the order's embodiment and end
  effector carrying every sensor add-on of the order;
- a usable site: a matching site with at least `objects_per_environment` registered active
  objects (`SiteObject`, in the order's object categories when it names any);
- environments: the usable sites, or in scene mode the active scenes of the usable sites;
  the plan needs `environments` of them and `distinct_objects` objects among them;
- capacity: the usable sites' fleets' weekly capacity together, against the hours they
  already owe (jobs offered, assigned or running) and the open jobs of the same embodiment
  waiting for a fleet; the order's hours after those give the collection days, plus
  REVIEW_DAYS for QA and delivery: the ETA. An ETA after the deadline (the order's, else the
  rate card's lead time) is a shortfall too.

Each shortfall is one sentence in plain words ("2 matching sites, the plan needs 8").
"""

import math
from datetime import timedelta
from decimal import ROUND_HALF_UP, Decimal

from django.db.models import Count, DecimalField, ExpressionWrapper, F, Sum
from django.utils import timezone

from fleets.models import (
    JOB_HOLDING_STATES,
    EndEffector,
    Fleet,
    Job,
    Robot,
    Scene,
    SiteObject,
)
from fleets.services.planning import CATEGORY_SITE_KINDS, EMBODIMENT_END_EFFECTOR
from orders.models import EnvironmentUnit
from orders.supply import SupplyAnswer, SupplyQuestion

REVIEW_DAYS = 2  # QA of the last episodes and the delivery's assembly, after collection
WAITING_STATES = (Job.Status.OPEN, Job.Status.FLAGGED)


def _hours(value: Decimal) -> str:
    text = format(value.quantize(Decimal("0.01"), rounding=ROUND_HALF_UP).normalize(), "f")
    return text


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def _matching_sites(question: SupplyQuestion) -> dict:
    """{site_id: fleet_id} of the matching sites (see the module docstring)."""
    end_effector = EMBODIMENT_END_EFFECTOR.get(question.embodiment, EndEffector.PARALLEL_GRIPPER)
    robots = Robot.objects.filter(
        active=True,
        embodiment__slug=question.embodiment,
        end_effector=end_effector,
        site__active=True,
        fleet__status=Fleet.Status.ACTIVE,
    )
    kinds = [str(kind) for kind in CATEGORY_SITE_KINDS.get(question.task_category, [])]
    if kinds:
        robots = robots.filter(site__kind__in=kinds)
    required = set(question.sensors)
    return {
        site_id: fleet_id
        for site_id, fleet_id, sensors in robots.values_list("site_id", "fleet_id", "sensor_slugs")
        if required.issubset(sensors or [])
    }


def _what_matches(question: SupplyQuestion) -> str:
    kinds = CATEGORY_SITE_KINDS.get(question.task_category)
    words = f"an active {question.embodiment} robot"
    if question.sensors:
        words += f" with {', '.join(question.sensors)}"
    if kinds:
        words += f" at a {' / '.join(str(kind.label).lower() for kind in kinds)} site"
    return words


def supply_check(question: SupplyQuestion) -> SupplyAnswer:
    today = timezone.localdate()
    sites = _matching_sites(question)
    objects = SiteObject.objects.filter(site_id__in=list(sites), active=True)
    if question.object_categories:
        objects = objects.filter(category__in=question.object_categories)
    object_counts = dict(
        objects.values("site_id").annotate(n=Count("id")).values_list("site_id", "n")
    )
    usable = [
        site for site in sites if object_counts.get(site, 0) >= question.objects_per_environment
    ]
    if question.environment_unit == EnvironmentUnit.SCENE:
        available = Scene.objects.filter(site_id__in=usable, active=True).count() if usable else 0
    else:
        available = len(usable)

    shortfalls = _plan_shortfalls(question, sites, usable, available, object_counts)
    fleet_ids = sorted({sites[site] for site in usable}, key=str)
    weekly = sum(
        Fleet.objects.filter(pk__in=fleet_ids).values_list("weekly_capacity_hours", flat=True),
        Decimal(0),
    )
    if usable and weekly <= 0:
        shortfalls.append("the matching fleets have no weekly capacity")
    if shortfalls:  # no date for a plan the platform cannot even start to cover
        return SupplyAnswer(
            coverable=False,
            shortfalls=tuple(shortfalls),
            eta=None,
            basis="No delivery date: the platform's fleets cannot offer this plan's"
            " environments and objects now.",
            available_environments=available,
        )

    backlog = _backlog(fleet_ids, question.embodiment)
    collect_days = math.ceil((backlog + question.hours) * 7 / weekly)
    eta = today + timedelta(days=collect_days + REVIEW_DAYS)
    basis = (
        f"{_plural(len(usable), 'usable site')} of {_plural(len(fleet_ids), 'active fleet')}"
        f" with {_hours(weekly)} h a week of capacity together; {_hours(backlog)} h already"
        f" committed to their jobs and waiting in open jobs for this robot; this order's"
        f" {_hours(question.hours)} h after them take about {_plural(collect_days, 'day')},"
        f" plus {REVIEW_DAYS} days for QA and delivery."
    )
    deadline, deadline_words = _deadline(question, today)
    if eta > deadline:
        shortfalls.append(
            f"at the matching fleets' free capacity the data would be ready about {eta},"
            f" after {deadline_words}"
        )
    return SupplyAnswer(
        coverable=not shortfalls,
        shortfalls=tuple(shortfalls),
        eta=eta,
        basis=basis,
        available_environments=available,
    )


def _deadline(question: SupplyQuestion, today) -> tuple:
    """The date the data is due (the order's deadline, else the rate card's lead time)."""
    if question.deadline is not None:
        return question.deadline, f"the deadline {question.deadline}"
    deadline = today + timedelta(days=question.lead_days)
    kind = "rush" if question.rush else "standard"
    return deadline, f"the {kind} lead time of {question.lead_days} days ({deadline})"


def _plan_shortfalls(
    question: SupplyQuestion, sites: dict, usable: list, available: int, object_counts: dict
) -> list[str]:
    """What the platform lacks for the plan's environments and objects, in plain words."""
    needed = question.environments
    scenes_mode = question.environment_unit == EnvironmentUnit.SCENE
    shortfalls = []
    object_words = _plural(question.objects_per_environment, "registered active object")
    if question.object_categories:
        object_words += f" ({', '.join(question.object_categories)})"
    sites_needed = 1 if scenes_mode else needed  # scenes: one site may hold them all
    if len(sites) < sites_needed:
        shortfalls.append(
            f"{_plural(len(sites), 'matching site')}, the plan needs"
            f" {'at least 1' if scenes_mode else needed}"
            f" (a matching site has {_what_matches(question)})"
        )
    elif len(usable) < sites_needed:
        shortfalls.append(
            f"{_plural(len(usable), 'matching site')} with at least {object_words},"
            f" the plan needs {'at least 1' if scenes_mode else needed}"
        )
    if scenes_mode and usable and available < needed:
        shortfalls.append(
            f"{_plural(available, 'active scene')} at matching sites with at least"
            f" {object_words}, the plan needs {needed} distinct scenes"
        )
    objects_there = sum(object_counts.get(site, 0) for site in usable)
    if usable and objects_there < question.distinct_objects:
        shortfalls.append(
            f"{_plural(objects_there, 'registered object')} at the usable sites,"
            f" the plan needs {question.distinct_objects} distinct objects"
        )
    return shortfalls


def _backlog(fleet_ids: list, embodiment: str) -> Decimal:
    """Hours the fleets still owe on jobs they hold, and hours of this robot's open jobs
    waiting for a fleet."""
    owed = ExpressionWrapper(
        F("target_hours") - F("progress_hours"),
        output_field=DecimalField(max_digits=12, decimal_places=2),
    )
    held = Job.objects.filter(fleet_id__in=fleet_ids, status__in=JOB_HOLDING_STATES).aggregate(
        hours=Sum(owed)
    )["hours"]
    waiting = Job.objects.filter(status__in=WAITING_STATES, embodiment__slug=embodiment).aggregate(
        hours=Sum("target_hours")
    )["hours"]
    return (held or Decimal(0)) + (waiting or Decimal(0))
