"""The matcher's golden set (tests/fleets/matching_golden.json): seeded random instances of
fleets/matching.assign and the decisions it took on each, with both preferences, pinned so
that a change of the matcher that changes any decision, score or rate fails
tests/fleets/test_matching_golden.py.

    python -m tests.fleets.matching_golden     # rewrite the JSON from the current matcher

Rewrite it only for a change meant to change decisions, and say so in its commit. Each
instance is stored as data (fleets, jobs with their candidate sites, bids, pay terms), so
the test rebuilds it without this module's random draws.
"""

import json
import random
import sys
from decimal import Decimal
from pathlib import Path

from fleets.matching import BidOption, FleetState, JobDemand, SitesById, assign
from fleets.services.pay_terms import PayTerms

GOLDEN = Path(__file__).with_name("matching_golden.json")
INSTANCES = 300
SEED = 29
# Orders planned by distinct scenes (issue 30): instances whose jobs carry scene slots (a site
# takes as many environments of an order as it has free scenes), drawn after the others.
SCENE_INSTANCES = 60
SCENE_SEED = 30
PREFERENCES = ("score", "headroom")


def _money(rng: random.Random, low: int, high: int) -> str:
    return f"{rng.randint(low, high)}.{rng.randint(0, 99):02d}"


def random_instance(rng: random.Random) -> dict:
    """One instance as plain data: fleets (some of the sites' fleets left out: inactive),
    sites, and jobs of a few orders and environments, with bids and pay terms on some."""
    fleet_count = rng.randint(2, 8)
    fleets = [
        {
            "fleet_id": f"F{i}",
            "weekly_capacity": str(rng.choice([2, 4, 8, 12, 20, 40])),
            "owed": str(rng.choice([0, 0, 1, 3])),
            "payout_rate": _money(rng, 20, 90),
            "quality": f"0.{rng.randint(0, 99):02d}",
            "currency": rng.choice(["USD", "USD", "USD", "EUR"]),
        }
        for i in range(fleet_count)
    ]
    # a site of fleet F<fleet_count> is an inactive fleet's (not among the fleets)
    owners = [
        rng.randrange(fleet_count + 1) if rng.random() < 0.1 else rng.randrange(fleet_count)
        for _ in range(rng.randint(2, 12))
    ]
    sites = [(f"s{i:02d}", f"F{owner}") for i, owner in enumerate(owners)]
    jobs = []
    for k in range(rng.randint(1, 12)):
        candidates = sorted(
            rng.sample(sites, rng.randint(0 if rng.random() < 0.05 else 1, min(6, len(sites))))
        )
        bids = [
            {"bid_id": f"B{k}-{n}", "site_id": site, "fleet_id": fleet}
            for n, (site, fleet) in enumerate(rng.sample(candidates, min(len(candidates), 2)))
            if rng.random() < 0.25
        ]
        terms = None
        if rng.random() < 0.8:
            terms = {
                "currency": rng.choice(["USD", "USD", "USD", "EUR"]),
                "ceiling": _money(rng, 40, 150),
                "original_fleet_id": rng.choice(
                    [None, None, None, f"F{rng.randrange(fleet_count)}"]
                ),
            }
        same = [site for site, _ in candidates if rng.random() < 0.15]
        jobs.append(
            {
                "job_id": f"J{k:02d}",
                "order_id": f"O{k // 3}",
                "environment_index": rng.randint(0, 2),
                "hours": f"{rng.randint(1, 6)}.{rng.choice(['00', '25', '50'])}",
                "weeks": str(rng.choice([1, 2, 3])),
                "sites": candidates,
                "site_order_given": rng.random() < 0.5,
                "same_environment_sites": same,
                "bids": bids,
                "rank": [k % 4],
                "terms": terms,
            }
        )
    return {"fleets": fleets, "jobs": jobs}


def scene_instance(rng: random.Random) -> dict:
    """A random instance whose orders mostly count scenes: each such order gives every site
    1-3 free scenes, and its jobs carry them for their candidate sites."""
    instance = random_instance(rng)
    slots = {}
    for job in instance["jobs"]:
        order_slots = slots.get(job["order_id"])
        if order_slots is None:
            order_slots = slots[job["order_id"]] = (
                {f"s{i:02d}": rng.randint(1, 3) for i in range(12)} if rng.random() < 0.8 else {}
            )
        if order_slots:
            job["scene_slots"] = {site: order_slots[site] for site, _ in job["sites"]}
    return instance


def fleet_states(instance: dict) -> dict:
    return {
        f["fleet_id"]: FleetState(
            f["fleet_id"],
            Decimal(f["weekly_capacity"]),
            Decimal(f["owed"]),
            Decimal(f["payout_rate"]),
            Decimal(f["quality"]),
            f["currency"],
        )
        for f in instance["fleets"]
    }


def job_demands(instance: dict) -> list[JobDemand]:
    demands = []
    for j in instance["jobs"]:
        pairs = tuple((site, fleet) for site, fleet in j["sites"])
        terms = j["terms"]
        demands.append(
            JobDemand(
                job_id=j["job_id"],
                order_id=j["order_id"],
                environment_index=j["environment_index"],
                hours=Decimal(j["hours"]),
                weeks=Decimal(j["weeks"]),
                sites=SitesById(pairs) if j["site_order_given"] else pairs,
                same_environment_sites=frozenset(j["same_environment_sites"]),
                scene_slots=j.get("scene_slots"),
                bids=tuple(BidOption(**bid) for bid in j["bids"]),
                rank=tuple(j["rank"]),
                terms=None
                if terms is None
                else PayTerms(
                    currency=terms["currency"],
                    ceiling=Decimal(terms["ceiling"]),
                    original_fleet_id=terms["original_fleet_id"],
                ),
            )
        )
    return demands


def decided(instance: dict, prefer: str) -> list[list]:
    """The matcher's decisions on the instance, in the order taken, as JSON-able rows:
    [job, outcome, site, fleet, score, bid, rate]."""
    decisions = assign(jobs=job_demands(instance), fleets=fleet_states(instance), prefer=prefer)
    return [
        [
            d.job_id,
            d.outcome,
            d.site_id,
            d.fleet_id,
            float(d.score),
            d.bid_id,
            None if d.rate is None else str(d.rate),
        ]
        for d in decisions
    ]


def golden() -> list[dict]:
    rng = random.Random(SEED)
    instances = [random_instance(rng) for _ in range(INSTANCES)]
    rng = random.Random(SCENE_SEED)
    instances += [scene_instance(rng) for _ in range(SCENE_INSTANCES)]
    return [
        {
            "instance": instance,
            "decisions": {prefer: decided(instance, prefer) for prefer in PREFERENCES},
        }
        for instance in instances
    ]


def main() -> int:
    cases = golden()
    lines = ",\n".join(json.dumps(case, separators=(",", ":")) for case in cases)
    GOLDEN.write_text(f"[\n{lines}\n]\n")
    decisions = sum(len(rows) for case in cases for rows in case["decisions"].values())
    print(f"{GOLDEN}: {len(cases)} instances, {decisions} decisions")
    return 0


if __name__ == "__main__":
    sys.exit(main())
