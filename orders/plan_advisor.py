"""The plan advisor: a proposed collection plan (environments x objects per environment x
demonstrations per cell) for a task, complexity and hours, with a one-paragraph why. Pure: no
database, no floats in what it decides. Published rules, not a black box: `RULES` is shown on
the price list page word for word, and `advise` applies exactly them.

The field's evidence (data-scaling studies of imitation learning over 15,000 real rollouts)
is that the diversity of environments and objects matters far more than the number of
demonstrations; the working recipe was 32 environments, each with a different object, about
50 demonstrations each.
"""

import math
from dataclasses import dataclass
from decimal import Decimal

# Typical length of one demonstration by complexity level (seconds): how many
# demonstrations an hour of accepted data holds.
DEMO_SECONDS = {1: 20, 2: 30, 3: 45, 4: 60, 5: 90}
DEMOS_PER_CELL = 50  # the aim per (environment, object) cell
DEMOS_PER_CELL_CONTACT_RICH = 30  # contact-rich, deformable, dexterous: more cells, earlier
HOURS_PER_ENVIRONMENT_FLOOR = Decimal(10)  # at least one environment per 10 hours
MIN_ENVIRONMENTS = 2  # when the hours allow it
MIN_HOURS_PER_ENVIRONMENT = Decimal("0.5")  # as orders.services enforces
OBJECT_CENTRIC_CATEGORIES = frozenset({"pick_and_place", "logistics", "household", "tool_use"})
OBJECT_CENTRIC_MIN_CELLS = 8  # object-centric tasks with this many cells: 2 objects each
EARLY_DIVERSITY_CATEGORIES = frozenset({"deformable", "dexterous"})
MAX_OBJECTS_PER_ENVIRONMENT = 5

RULES = (
    "Diversity over count: aim for about 50 demonstrations per (environment, object) cell and"
    " spend the rest of the hours on more cells, not on more demonstrations of the same one.",
    "A demonstration lasts about 20 s at L1, 30 s at L2, 45 s at L3, 60 s at L4 and 90 s at L5:"
    " that turns the hours into a number of demonstrations.",
    "Contact-rich, deformable and dexterous tasks (and any task at L4 or L5) aim for 30"
    " demonstrations per cell instead, so they get more environments early.",
    "At least one environment per 10 hours, and at least 2 environments when the hours allow"
    " (each environment needs 0.5 h or more).",
    "One object per environment, each environment a different object; object-centric tasks"
    " (pick and place, logistics, household, tool use) with 8 cells or more take 2 objects per"
    " environment.",
    "Never more environments than the platform's fleets can offer now (the supply check, when"
    " it finds any) nor than an order may have; past that bound, more objects per environment"
    " (at most 5) keep the cells.",
)


@dataclass(frozen=True)
class PlanAdvice:
    environments: int
    objects_per_environment: int
    distinct_objects: int
    demos_per_cell: int
    why: str

    def as_json(self) -> dict:
        return {
            "environments": self.environments,
            "objects_per_environment": self.objects_per_environment,
            "distinct_objects": self.distinct_objects,
            "demos_per_cell": self.demos_per_cell,
            "why": self.why,
        }


def advise(
    *,
    task_category: str,
    contact_rich: bool,
    complexity: int,
    hours: Decimal,
    max_environments: int,
    available_environments: int | None = None,
) -> PlanAdvice:
    if not isinstance(hours, Decimal) or hours <= 0:
        raise ValueError("hours must be a positive Decimal")
    demo_seconds = DEMO_SECONDS[complexity]
    demonstrations = max(1, int(hours * 3600 // demo_seconds))
    early = contact_rich or complexity >= 4 or task_category in EARLY_DIVERSITY_CATEGORIES
    aim = DEMOS_PER_CELL_CONTACT_RICH if early else DEMOS_PER_CELL
    cells = max(1, demonstrations // aim)
    object_centric = task_category in OBJECT_CENTRIC_CATEGORIES
    objects = 2 if object_centric and cells >= OBJECT_CENTRIC_MIN_CELLS else 1
    wanted = math.ceil(cells / objects)
    floor = math.ceil(hours / HOURS_PER_ENVIRONMENT_FLOOR)
    environments = max(wanted, floor, MIN_ENVIRONMENTS)

    # the bounds: what an order may have, what the hours carry, what the fleets offer now
    bounds = {
        "an order's limit": max_environments,
        "0.5 h per environment": int(hours // MIN_HOURS_PER_ENVIRONMENT),
    }
    if available_environments:  # none found: the supply check's warning says so, not the plan
        bounds["the environments the platform's fleets offer now"] = available_environments
    bound_name, bound = min(bounds.items(), key=lambda item: item[1])
    capped = environments > bound
    environments = max(1, min(environments, bound))
    if capped:
        objects = min(MAX_OBJECTS_PER_ENVIRONMENT, max(objects, math.ceil(cells / environments)))
    cell_count = environments * objects
    demos_per_cell = max(1, demonstrations // cell_count)

    why = [
        f"{hours} h at L{complexity} hold about {demonstrations} demonstrations of"
        f" ~{demo_seconds} s.",
        "Diversity of environments and objects matters more than the number of"
        f" demonstrations, so the plan aims for about {aim} demonstrations per"
        " (environment, object) cell"
        + (
            " (contact-rich, deformable or dexterous work needs more real variety early)"
            if early
            else ""
        )
        + f" and spreads the rest over {cell_count} cell(s):"
        f" {environments} environment(s) x {objects} object(s) each, every cell a different"
        f" object ({cell_count} distinct), about {demos_per_cell} demonstrations per cell.",
    ]
    if floor > wanted and not capped:
        why.append(f"At least one environment per {HOURS_PER_ENVIRONMENT_FLOOR} h sets the floor.")
    if capped:
        why.append(
            f"Environments are bounded by {bound_name} ({bound}); more objects per environment"
            " keep the variety."
        )
    return PlanAdvice(
        environments=environments,
        objects_per_environment=objects,
        distinct_objects=cell_count,
        demos_per_cell=demos_per_cell,
        why=" ".join(why),
    )
