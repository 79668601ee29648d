"""Dispatch benchmark: the real dispatcher (fleets.services.dispatch.job_dispatch) on PostgreSQL.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/mk_fleets_bench \\
        .venv/bin/python bench/dispatch_bench.py [--jobs 10000 --fleets 1000]

Needs the `bench` extra (scipy): pip install -e '.[bench]'.
Creates a scratch database (test_<name>), destroys it at the end. Two instances:

1. Large: N jobs (4 environments per order, one job per environment) over F fleets. Prints
   wall time, queries per job, and job-hours placed (offered; fleets then accept) against the
   hours demanded. Too large for an exact solver.
2. Small, tight capacity: the same dispatcher against the optimum of the same instance,
   computed exactly as a mixed-integer program (scipy.optimize.milp / HiGHS):
       maximise   sum hours_j x_js
       subject to sum_s x_js <= 1                         every job placed at most once
                  sum_{j, s in fleet f} hours_j x_js <= capacity_f(deadline)
                  sum_{j in order o} x_js <= 1            every site once per order (diversity)
                  x_js in {0, 1}, only for eligible (capability, site kind) pairs
   and prints the ratio dispatcher / optimum.

Each job's dispatch is timed as the Celery task runs it, minus the broker: the service call.
Offers count against the fleet's capacity exactly like assignments, so "placed" = offered.
"""

import argparse
import os
import random
import sys
import time
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "marketplace.settings")

import django

django.setup()

from django.db import connection  # noqa: E402
from django.utils import timezone  # noqa: E402

from fleets import selectors  # noqa: E402
from fleets.models import Fleet, Job, Robot, Site  # noqa: E402
from fleets.services.dispatch import job_dispatch  # noqa: E402
from fleets.services.planning import order_plan  # noqa: E402
from marketplace.models import Organization  # noqa: E402
from orders.models import ComplexityLevel, Embodiment, Order, RateCard, TaskType  # noqa: E402

# Tasks are not published: planning and dispatch are measured, not the broker.
NO_QUEUEING = mock.patch("marketplace.queueing.enqueue_or_leave_to_sweeper")

EMBODIMENTS = ["franka-fr3", "ur5e", "so100"]
SENSORS = ["wrist-camera", "rgbd-camera", "force-torque", "tactile"]
TASKS = ["peg-insertion", "table-setting", "bin-picking", "cloth-folding"]
SITE_KINDS = ["kitchen", "household", "lab_bench", "production_line", "warehouse_shelf"]
ENVIRONMENTS = 4


def build(*, jobs: int, fleets: int, weekly: tuple[float, float], seed: int):
    rng = random.Random(seed)
    embodiments = {e.slug: e for e in Embodiment.objects.filter(slug__in=EMBODIMENTS)}
    tasks = {t.slug: t for t in TaskType.objects.filter(slug__in=TASKS)}
    complexity = ComplexityLevel.objects.get(level=3)
    rate_card = RateCard.objects.get(version=1)
    operators = Organization.objects.bulk_create(
        [
            Organization(name=f"op {i}", kind=Organization.Kind.FLEET_OPERATOR)
            for i in range(max(1, fleets // 10))
        ]
    )
    fleet_rows = Fleet.objects.bulk_create(
        [
            Fleet(
                organization=operators[i % len(operators)],
                name=f"fleet {i}",
                weekly_capacity_hours=Decimal(str(round(rng.uniform(*weekly), 1))),
                payout_rate_per_hour=Decimal(rng.randint(30, 90)),
                quality_score=Decimal(str(round(rng.uniform(0.3, 1.0), 3))),
            )
            for i in range(fleets)
        ]
    )
    sites, robots = [], []
    for fleet in fleet_rows:
        for k in range(rng.randint(1, 3)):
            site = Site(fleet=fleet, name=f"{fleet.name} site {k}", kind=rng.choice(SITE_KINDS))
            sites.append(site)
            for r in range(rng.randint(1, 2)):
                robots.append(
                    Robot(
                        fleet=fleet,
                        site=site,
                        name=f"{site.name} robot {r}",
                        embodiment=embodiments[rng.choice(EMBODIMENTS)],
                        end_effector="parallel_gripper",
                        sensor_slugs=sorted(rng.sample(SENSORS, rng.randint(0, 3))),
                    )
                )
    Site.objects.bulk_create(sites)
    Robot.objects.bulk_create(robots)
    customer = Organization.objects.create(name="customer", kind=Organization.Kind.CUSTOMER)
    deadline = timezone.localdate() + timedelta(days=28)
    orders = Order.objects.bulk_create(
        [
            Order(
                organization=customer,
                task_type=tasks[rng.choice(TASKS)],
                complexity=complexity,
                embodiment=embodiments[rng.choice(EMBODIMENTS)],
                hours=Decimal(rng.randint(8, 32)) / 2,  # 4..16 h: one job per environment
                environments=ENVIRONMENTS,
                sensor_slugs=sorted(rng.sample(SENSORS, rng.choice([0, 0, 1]))),
                rate_card=rate_card,
                currency="USD",
                lines=[],
                total=Decimal("0"),
                status=Order.Status.PAID,
                deadline=deadline,
            )
            for _ in range(jobs // ENVIRONMENTS)
        ]
    )
    with NO_QUEUEING:  # plan only; dispatch is measured below
        for order in orders:
            order_plan(order_id=order.id)
    return orders, [f.pk for f in fleet_rows]


def dispatch_all(orders: list[Order]) -> dict:
    job_ids = list(
        Job.objects.filter(order__in=orders)
        .order_by("order__created_at", "order_id", "sequence")
        .values_list("pk", flat=True)
    )
    outcomes: dict[str, int] = {}
    queries = [0]

    def count(execute, sql, params, many, context):
        queries[0] += 1
        return execute(sql, params, many, context)

    with NO_QUEUEING, connection.execute_wrapper(count):
        started = time.perf_counter()
        for job_id in job_ids:
            outcome = job_dispatch(job_id=job_id).outcome
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
        elapsed = time.perf_counter() - started
    jobs = Job.objects.filter(order__in=orders)
    demanded = sum(j.target_hours for j in jobs)
    now, deadline = timezone.now(), jobs.first().deadline
    capacity = sum(
        selectors.capacity_until(fleet, deadline, now)
        for fleet in Fleet.objects.filter(status=Fleet.Status.ACTIVE)
    )
    placed = sum(j.target_hours for j in jobs.filter(status=Job.Status.OFFERED))
    return {
        "jobs": len(job_ids),
        "seconds": elapsed,
        "queries": queries[0],
        "outcomes": outcomes,
        "demanded": demanded,
        "placed": placed,
        "capacity": capacity,
    }


def optimum(orders: list[Order]) -> float:
    import numpy as np
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import lil_matrix

    now = timezone.now()
    jobs = list(Job.objects.filter(order__in=orders))
    site_info = {}
    for robot in Robot.objects.select_related("site", "fleet").filter(active=True):
        site_info.setdefault(robot.site_id, (robot.site, robot.fleet, []))[2].append(robot)
    pairs = []
    for j, job in enumerate(jobs):
        for site_id, (site, fleet, robots) in site_info.items():
            if job.site_kinds and site.kind not in job.site_kinds:
                continue
            if any(
                r.embodiment_id == job.embodiment_id
                and r.end_effector == job.end_effector
                and set(job.sensor_slugs) <= set(r.sensor_slugs)
                for r in robots
            ):
                pairs.append((j, site_id, fleet))
    fleets = {f.pk: i for i, f in enumerate({p[2].pk: p[2] for p in pairs}.values())}
    fleet_obj = {p[2].pk: p[2] for p in pairs}
    hours = np.array([float(jobs[j].target_hours) for j, _, _ in pairs])
    n = len(pairs)
    rows_job = lil_matrix((len(jobs), n))
    rows_fleet = lil_matrix((len(fleets), n))
    order_site_index: dict = {}
    rows_div_entries = []
    for k, (j, site_id, fleet) in enumerate(pairs):
        rows_job[j, k] = 1
        rows_fleet[fleets[fleet.pk], k] = float(jobs[j].target_hours)
        key = (jobs[j].order_id, site_id)
        row = order_site_index.setdefault(key, len(order_site_index))
        rows_div_entries.append((row, k))
    rows_div = lil_matrix((len(order_site_index), n))
    for row, k in rows_div_entries:
        rows_div[row, k] = 1
    caps = np.array(
        [float(selectors.capacity_until(fleet_obj[pk], jobs[0].deadline, now)) for pk in fleets]
    )
    constraints = [
        LinearConstraint(rows_job.tocsr(), -np.inf, 1),
        LinearConstraint(rows_fleet.tocsr(), -np.inf, caps),
        LinearConstraint(rows_div.tocsr(), -np.inf, 1),
    ]
    sys.stdout.flush()
    saved_stdout = os.dup(1)
    with open(os.devnull, "wb") as devnull:
        os.dup2(devnull.fileno(), 1)  # HiGHS chatters on the C-level stdout
        try:
            result = milp(
                -hours,
                constraints=constraints,
                integrality=np.ones(n),
                bounds=Bounds(0, 1),
                options={"time_limit": 300, "mip_rel_gap": 0},
            )
        finally:
            os.dup2(saved_stdout, 1)
            os.close(saved_stdout)
    if result.x is None:
        raise RuntimeError(f"solver failed: {result.message}")
    bound = -result.mip_dual_bound if result.mip_dual_bound is not None else float("nan")
    return float(hours @ np.round(result.x)), bound, result.message


def report(title: str, stats: dict) -> None:
    jobs = stats["jobs"]
    print(f"\n== {title}")
    print(f"jobs dispatched        {jobs}")
    per_job = 1000 * stats["seconds"] / jobs
    print(f"wall time              {stats['seconds']:.1f} s ({per_job:.1f} ms/job)")
    print(f"queries per job        {stats['queries'] / jobs:.2f}")
    print(f"outcomes               {stats['outcomes']}")
    print(
        f"job-hours placed       {stats['placed']} of {stats['demanded']} demanded "
        f"({float(stats['placed'] / stats['demanded']):.3f})"
    )
    bound = min(stats["demanded"], stats["capacity"])
    print(
        f"simple upper bound     {bound:.2f} = min(demand, all active fleets' capacity before "
        f"the deadline); placed / bound = {float(stats['placed'] / bound):.3f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=10000)
    parser.add_argument("--fleets", type=int, default=1000)
    parser.add_argument("--small-jobs", type=int, default=80)
    parser.add_argument("--small-fleets", type=int, default=12)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    if connection.vendor != "postgresql":
        sys.exit("Run against PostgreSQL: set DATABASE_URL=postgres://...")

    old_name = connection.settings_dict["NAME"]
    connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
    try:
        print(f"database {connection.settings_dict['NAME']} (scratch, dropped at the end)")
        started = time.perf_counter()
        large, _ = build(jobs=args.jobs, fleets=args.fleets, weekly=(1, 8), seed=args.seed)
        print(f"built and planned the large instance in {time.perf_counter() - started:.1f} s")
        report(f"large: {args.jobs} jobs over {args.fleets} fleets", dispatch_all(large))

        small, small_fleets = build(
            jobs=args.small_jobs, fleets=args.small_fleets, weekly=(1, 6), seed=args.seed + 1
        )
        # The small instance runs alone: the large instance's fleets are retired first.
        Fleet.objects.exclude(pk__in=small_fleets).update(status=Fleet.Status.RETIRED)
        Robot.objects.exclude(fleet_id__in=small_fleets).update(active=False)
        stats = dispatch_all(small)
        report(f"small: {args.small_jobs} jobs over {args.small_fleets} fleets", stats)
        started = time.perf_counter()
        best, bound, message = optimum(small)
        solve = time.perf_counter() - started
        print(f"exact optimum (MILP)    {best:.2f} job-hours ({solve:.1f} s; {message})")
        print(f"solver upper bound      {bound:.2f} job-hours")
        print(f"RATIO dispatcher / optimum = {float(stats['placed']) / best:.4f}")
        print(f"ratio dispatcher / proven upper bound >= {float(stats['placed']) / bound:.4f}")
    finally:
        connection.creation.destroy_test_db(old_name, verbosity=0)


if __name__ == "__main__":
    main()
