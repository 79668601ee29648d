"""Dispatch benchmark: the batch dispatcher (fleets.services.batch_dispatch) on PostgreSQL.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/mk_fleets_bench \\
        .venv/bin/python bench/dispatch_bench.py [--jobs 10000 --fleets 1000 --batch 10000]

Needs the `bench` extra (scipy): pip install -e '.[bench]'.
Creates a scratch database (test_<name>), destroys it at the end. Three instances, each alone
(the previous instance's fleets are retired first):

1. 1,000 jobs over 100 fleets and 2. 10,000 jobs over 1,000 fleets (4 environments per
   order, one job per environment; capacity short of demand). Every open job goes through
   open_jobs_dispatch, --batch jobs per transaction (FOR UPDATE SKIP LOCKED, set queries,
   bulk writes). Prints the median wall time of --repeat runs (all but the last rolled back)
   as `<n> ms/job`, the statements run as `<n> queries/job`, job-hours placed (offered;
   fleets then accept) against the hours demanded and against the LP bound (lp_bound: the
   LP relaxation without the diversity rule, an upper bound on what any dispatcher places),
   and the ratio of the per-job times of the two sizes.
3. Small, tight capacity (80 jobs, 12 fleets): the same dispatcher against the exact optimum
   of the same instance, a mixed-integer program (scipy.optimize.milp / HiGHS):
       maximise   sum hours_j x_js
       subject to sum_s x_js <= 1                         every job placed at most once
                  sum_{j, s in fleet f} hours_j x_js <= capacity_f(deadline)
                  sum_{j in order o} x_js <= 1            every site once per order (diversity)
                  x_js in {0, 1}, only for eligible (capability, site kind) pairs
   and prints the ratio dispatcher / optimum.

Dispatch is timed as the Celery task runs it, minus the broker: the service call. Offers
count against the fleet's capacity exactly like assignments, so "placed" = offered. The
eligible pairs of the bounds are derived here from the robots, independently of the
dispatcher's selectors.
"""

import argparse
import cProfile
import os
import random
import statistics
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

from django.conf import settings  # noqa: E402
from django.db import connection, transaction  # noqa: E402
from django.utils import timezone  # noqa: E402

from fleets import selectors  # noqa: E402
from fleets.models import Fleet, Job, Robot, Site  # noqa: E402
from fleets.services.dispatch import open_jobs_dispatch  # noqa: E402
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
PRICE_PER_HOUR = Decimal(100)  # USD, as the fleets are paid


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
                # 4..16 h: one job per environment (drawn here, in the order of before)
                hours=(order_hours := Decimal(rng.randint(8, 32)) / 2),
                environments=ENVIRONMENTS,
                sensor_slugs=sorted(rng.sample(SENSORS, rng.choice([0, 0, 1]))),
                rate_card=rate_card,
                currency="USD",
                lines=[],
                # priced above every fleet's rate (30..90/h): the pay rule leaves every fleet
                # eligible, so the instance (and its bounds) are those of before the rule
                total=order_hours * PRICE_PER_HOUR,
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


def dispatch_all(orders: list[Order], *, batch: int, prefer: str) -> dict:
    """Every open job through the batch dispatcher, `batch` jobs per transaction, as the
    Celery task runs it (the service call, without the broker)."""
    queries = [0]

    def count(execute, sql, params, many, context):
        queries[0] += 1
        return execute(sql, params, many, context)

    now = timezone.now()
    outcomes: dict[str, int] = {}
    batches = 0
    with NO_QUEUEING, connection.execute_wrapper(count):
        started, cpu_started = time.perf_counter(), time.process_time()
        while results := open_jobs_dispatch(limit=batch, prefer=prefer):
            batches += 1
            for result in results.values():
                outcomes[result.outcome] = outcomes.get(result.outcome, 0) + 1
        elapsed = time.perf_counter() - started
        cpu = time.process_time() - cpu_started
    jobs = Job.objects.filter(order__in=orders)
    demanded = sum(j.target_hours for j in jobs)
    deadline = jobs.first().deadline
    capacity = sum(
        selectors.capacity_until(fleet, deadline, now)
        for fleet in Fleet.objects.filter(status=Fleet.Status.ACTIVE)
    )
    placed = sum(j.target_hours for j in jobs.filter(status=Job.Status.OFFERED))
    return {
        "jobs": sum(outcomes.values()),
        "batches": batches,
        "seconds": elapsed,
        "cpu": cpu,
        "queries": queries[0],
        "outcomes": outcomes,
        "demanded": demanded,
        "placed": placed,
        "capacity": capacity,
        "now": now,
    }


def _signature(job: Job) -> tuple:
    return (job.embodiment_id, job.end_effector, tuple(job.sensor_slugs), tuple(job.site_kinds))


def _eligible_by_signature(jobs: list[Job]) -> dict:
    """(capabilities, site kinds) -> [(site id, fleet)] the rules allow before capacity,
    derived here from the robots (independently of the dispatcher's own selectors)."""
    site_info: dict = {}
    active = Robot.objects.select_related("site", "fleet").filter(
        active=True, site__active=True, fleet__status=Fleet.Status.ACTIVE
    )
    for robot in active:
        site_info.setdefault(robot.site_id, (robot.site, robot.fleet, []))[2].append(
            (robot.embodiment_id, robot.end_effector, set(robot.sensor_slugs))
        )
    by_signature: dict = {}
    for job in jobs:
        key = _signature(job)
        if key not in by_signature:
            by_signature[key] = [
                (site_id, fleet)
                for site_id, (site, fleet, robots) in site_info.items()
                if (not job.site_kinds or site.kind in job.site_kinds)
                and any(
                    e == job.embodiment_id and x == job.end_effector and set(job.sensor_slugs) <= s
                    for e, x, s in robots
                )
            ]
    return by_signature


def _eligible_pairs(jobs: list[Job]) -> list[tuple[int, object, Fleet]]:
    """(job index, site id, fleet) for every pair the rules allow before capacity."""
    by_signature = _eligible_by_signature(jobs)
    return [
        (j, site_id, fleet)
        for j, job in enumerate(jobs)
        for site_id, fleet in by_signature[_signature(job)]
    ]


def _quiet_highs(solve):
    """HiGHS chatters on the C-level stdout: run `solve` with it sent to /dev/null."""
    sys.stdout.flush()
    saved_stdout = os.dup(1)
    with open(os.devnull, "wb") as devnull:
        os.dup2(devnull.fileno(), 1)
        try:
            return solve()
        finally:
            os.dup2(saved_stdout, 1)
            os.close(saved_stdout)


def lp_bound(orders: list[Order], now) -> tuple[float, float]:
    """An upper bound on the job-hours any dispatcher can place: the LP relaxation of the
    placement problem without the diversity rule (which only removes solutions, so the
    bound stays valid). Jobs alike (capabilities, site kinds, hours) are interchangeable in
    it, so it is solved over classes x fleets:
        maximise   sum y_cf
        subject to sum_f y_cf <= count_c x hours_c      every class placed at most once
                   sum_c y_cf <= capacity_f(deadline)   every fleet's capacity
                   y_cf >= 0, only for fleets with a site eligible for the class
    Returns (bound, seconds)."""
    import numpy as np
    from scipy.optimize import linprog
    from scipy.sparse import lil_matrix, vstack

    started = time.perf_counter()
    jobs = list(Job.objects.filter(order__in=orders))
    by_signature = _eligible_by_signature(jobs)
    classes: dict = {}
    for job in jobs:
        key = (_signature(job), job.target_hours)
        classes[key] = classes.get(key, 0) + 1
    fleets: dict = {}
    variables: dict = {}
    for c, (signature, _) in enumerate(classes):
        for _, fleet in by_signature[signature]:
            f = fleets.setdefault(fleet.pk, (len(fleets), fleet))[0]
            variables.setdefault((c, f), len(variables))
    rows_class = lil_matrix((len(classes), len(variables)))
    rows_fleet = lil_matrix((len(fleets), len(variables)))
    for (c, f), k in variables.items():
        rows_class[c, k] = 1
        rows_fleet[f, k] = 1
    demand = [count * float(hours) for (_, hours), count in classes.items()]
    deadline = jobs[0].deadline
    caps = [0.0] * len(fleets)
    for index, fleet in fleets.values():
        caps[index] = float(selectors.capacity_until(fleet, deadline, now))
    a_ub = vstack([rows_class.tocsr(), rows_fleet.tocsr()])
    result = _quiet_highs(
        lambda: linprog(
            -np.ones(len(variables)),
            A_ub=a_ub,
            b_ub=np.array(demand + caps),
            bounds=(0, None),
            method="highs",
        )
    )
    if result.status != 0:
        raise RuntimeError(f"LP failed: {result.message}")
    return -result.fun, time.perf_counter() - started


def optimum(orders: list[Order], now) -> tuple[float, float, str]:
    """The exact optimum of the small instance (scipy.optimize.milp / HiGHS), diversity
    included: (optimum, the solver's proven upper bound, its message)."""
    import numpy as np
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import lil_matrix

    jobs = list(Job.objects.filter(order__in=orders))
    pairs = _eligible_pairs(jobs)
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
    result = _quiet_highs(
        lambda: milp(
            -hours,
            constraints=constraints,
            integrality=np.ones(n),
            bounds=Bounds(0, 1),
            options={"time_limit": 300, "mip_rel_gap": 0},
        )
    )
    if result.x is None:
        raise RuntimeError(f"solver failed: {result.message}")
    bound = -result.mip_dual_bound if result.mip_dual_bound is not None else float("nan")
    return float(hours @ np.round(result.x)), bound, result.message


def report(title: str, stats: dict) -> tuple[float, float]:
    """Print one instance's figures; returns its (wall, CPU) ms per job."""
    jobs = stats["jobs"]
    per_job = 1000 * stats["seconds"] / jobs
    cpu_per_job = 1000 * stats["cpu"] / jobs
    print(f"\n== {title}")
    print(f"jobs dispatched        {jobs} in {stats['batches']} batches")
    print(f"wall time              {stats['seconds']:.2f} s ({per_job:.3f} ms/job)")
    print(f"CPU time (this process, not PostgreSQL's) {cpu_per_job:.3f} ms/job")
    print(f"queries                {stats['queries']} ({stats['queries'] / jobs:.3f} queries/job)")
    print(f"outcomes               {stats['outcomes']}")
    print(
        f"job-hours placed       {stats['placed']} of {stats['demanded']} demanded "
        f"({float(stats['placed'] / stats['demanded']):.3f})"
    )
    bound = min(stats["demanded"], stats["capacity"])
    print(
        f"simple upper bound     {bound:.2f} = min(demand, all active fleets' capacity before "
        f"the deadline); placed / bound = {float(stats['placed'] / bound):.4f}"
    )
    return per_job, cpu_per_job


def retire_all_fleets() -> None:
    """Each instance runs alone: the previous instance's fleets and robots are retired."""
    Fleet.objects.update(status=Fleet.Status.RETIRED)
    Robot.objects.update(active=False)


def run_instance(title, *, jobs, fleets, weekly, seed, args, bound: str) -> tuple:
    retire_all_fleets()
    started = time.perf_counter()
    orders, _ = build(jobs=jobs, fleets=fleets, weekly=weekly, seed=seed)
    print(f"\nbuilt and planned {title} in {time.perf_counter() - started:.1f} s")
    # The machine is shared: the dispatch runs `repeat` times on the same jobs, each run but
    # the last rolled back, and the median time is the figure (every run places the same).
    runs = []
    for attempt in range(args.repeat):
        last = attempt == args.repeat - 1
        profile = cProfile.Profile() if args.profile and last else None
        with transaction.atomic():
            if profile:
                profile.enable()
            runs.append(dispatch_all(orders, batch=args.batch, prefer=args.prefer))
            if profile:
                profile.disable()
                profile.dump_stats(f"{args.profile}-{jobs}.prof")
            if not last:
                transaction.set_rollback(True)
    stats = {
        **runs[-1],
        "seconds": statistics.median(r["seconds"] for r in runs),
        "cpu": statistics.median(r["cpu"] for r in runs),
    }
    times = ", ".join(f"{r['seconds']:.2f} s" for r in runs)
    print(f"dispatch runs          {times} (median taken)")
    per_job = report(title, stats)
    placed = float(stats["placed"])
    if bound == "lp":
        value, seconds = lp_bound(orders, stats["now"])
        print(f"LP bound               {value:.2f} job-hours ({seconds:.1f} s)")
        print(f"RATIO dispatcher / LP bound = {placed / value:.4f}")
    else:
        best, proven, message = optimum(orders, stats["now"])
        print(f"exact optimum (MILP)   {best:.2f} job-hours ({message})")
        print(f"solver upper bound     {proven:.2f} job-hours")
        print(f"RATIO dispatcher / MILP optimum = {placed / best:.4f}")
    return per_job


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=10000)
    parser.add_argument("--fleets", type=int, default=1000)
    parser.add_argument("--mid-jobs", type=int, default=1000)
    parser.add_argument("--mid-fleets", type=int, default=100)
    parser.add_argument("--small-jobs", type=int, default=80)
    parser.add_argument("--small-fleets", type=int, default=12)
    parser.add_argument(
        "--batch",
        type=int,
        default=settings.FLEETS_DISPATCH_BATCH_SIZE,
        help="jobs per dispatch transaction (default: FLEETS_DISPATCH_BATCH_SIZE, production's)",
    )
    parser.add_argument("--prefer", choices=["score", "headroom"], default="score")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=3, help="dispatch runs per instance")
    parser.add_argument(
        "--profile",
        metavar="PREFIX",
        help="cProfile the last run of each instance into PREFIX-<jobs>.prof (slows it)",
    )
    args = parser.parse_args()
    if connection.vendor != "postgresql":
        sys.exit("Run against PostgreSQL: set DATABASE_URL=postgres://...")

    old_name = connection.settings_dict["NAME"]
    connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
    try:
        print(f"database {connection.settings_dict['NAME']} (scratch, dropped at the end)")
        print(f"batch dispatcher: {args.batch} jobs per batch, prefer={args.prefer}")
        mid = run_instance(
            f"{args.mid_jobs} jobs over {args.mid_fleets} fleets",
            jobs=args.mid_jobs,
            fleets=args.mid_fleets,
            weekly=(1, 8),
            seed=args.seed,
            args=args,
            bound="lp",
        )
        large = run_instance(
            f"{args.jobs} jobs over {args.fleets} fleets",
            jobs=args.jobs,
            fleets=args.fleets,
            weekly=(1, 8),
            seed=args.seed,
            args=args,
            bound="lp",
        )
        sizes = f"{args.jobs}/{args.fleets} vs {args.mid_jobs}/{args.mid_fleets}"
        print(f"\nRATIO per-job wall time {sizes} = {large[0] / mid[0]:.3f}")
        print(f"RATIO per-job CPU time {sizes} = {large[1] / mid[1]:.3f}")
        run_instance(
            f"small, tight capacity: {args.small_jobs} jobs over {args.small_fleets} fleets",
            jobs=args.small_jobs,
            fleets=args.small_fleets,
            weekly=(1, 6),
            seed=args.seed + 1,
            args=args,
            bound="milp",
        )
    finally:
        connection.creation.destroy_test_db(old_name, verbosity=0)


if __name__ == "__main__":
    main()
