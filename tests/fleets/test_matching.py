"""The batch dispatcher's assignment (fleets/matching.py), without the database."""

import random
from decimal import Decimal

from fleets.matching import BidOption, FleetState, JobDemand, assign, placed_hours

WEEK = Decimal(1)


def fleet(fleet_id, weekly, *, owed="0", rate="50", quality="0.5"):
    return FleetState(fleet_id, Decimal(weekly), Decimal(owed), Decimal(rate), Decimal(quality))


def job(job_id, sites, *, hours="2", order=None, env=0, bids=(), same=()):
    return JobDemand(
        job_id=job_id,
        order_id=order or f"order-{job_id}",
        environment_index=env,
        hours=Decimal(hours),
        weeks=WEEK,
        sites=tuple(sites),
        same_environment_sites=frozenset(same),
        bids=tuple(bids),
    )


def by_job(decisions):
    return {d.job_id: d for d in decisions}


def test_most_constrained_first_beats_the_greedy_order():
    # given: fleet F1 (best quality) fits one job; job A can go to F1 or F2, job B only to F1
    fleets = {"F1": fleet("F1", "3", quality="0.9"), "F2": fleet("F2", "3", quality="0.1")}
    jobs = [job("A", [("x", "F1"), ("y", "F2")]), job("B", [("x", "F1")])]
    # when dispatched greedily in the given order, A takes F1 and B is left without a fleet
    greedy = by_job(assign(jobs=jobs, fleets=fleets, order="given"))
    assert greedy["A"].fleet_id == "F1" and greedy["B"].outcome == "flag"
    # then most-constrained-first places both: B on F1, A on F2
    decisions = assign(jobs=jobs, fleets=fleets)
    placed = by_job(decisions)
    assert (placed["B"].fleet_id, placed["A"].fleet_id) == ("F1", "F2")
    assert placed_hours(jobs, decisions) == Decimal(4) > placed_hours(jobs, list(greedy.values()))


def test_capacity_counts_hours_owed_and_the_batch_own_placements():
    # given a fleet with 5 h a week, 1 h already owed: room for two 2 h jobs, not three
    fleets = {"F": fleet("F", "5", owed="1")}
    jobs = [job(f"J{i}", [(f"s{i}", "F")]) for i in range(3)]
    # when
    decisions = assign(jobs=jobs, fleets=fleets)
    # then
    assert sorted(d.outcome for d in decisions) == ["flag", "offer", "offer"]


def test_capacity_scales_with_the_weeks_until_the_deadline():
    fleets = {"F": fleet("F", "3")}
    short = JobDemand("short", "o1", 0, Decimal(2), Decimal("0.5"), (("s", "F"),))
    long = JobDemand("long", "o2", 0, Decimal(2), Decimal(1), (("s", "F"),))
    decisions = by_job(assign(jobs=[short, long], fleets=fleets))
    assert decisions["short"].outcome == "flag"  # 1.5 h before its deadline
    assert decisions["long"].outcome == "offer"


def test_diversity_other_environments_never_share_a_site_the_same_one_returns():
    # given an order with environments 0, 0, 1, and two sites of one large fleet
    fleets = {"F": fleet("F", "100")}
    sites = [("a", "F"), ("b", "F")]
    jobs = [
        job("e0-1", sites, order="o", env=0),
        job("e0-2", sites, order="o", env=0),
        job("e1", sites, order="o", env=1),
    ]
    # when
    placed = by_job(assign(jobs=jobs, fleets=fleets))
    # then environment 0 stays on one site, environment 1 gets the other
    assert placed["e0-1"].site_id == placed["e0-2"].site_id
    assert placed["e1"].site_id != placed["e0-1"].site_id
    # and a third environment finds no unused site: flagged, never doubled up
    more = [*jobs, job("e2", sites, order="o", env=2)]
    assert by_job(assign(jobs=more, fleets=fleets))["e2"].outcome == "flag"


def test_a_site_the_environment_already_uses_wins_over_a_better_fleet():
    fleets = {"good": fleet("good", "100", quality="1"), "used": fleet("used", "100")}
    placed = assign(jobs=[job("J", [("g", "good"), ("u", "used")], same={"u"})], fleets=fleets)
    assert placed[0].site_id == "u"


def test_the_score_prefers_quality_and_ties_break_on_the_site_id():
    fleets = {"lo": fleet("lo", "40", quality="0.2"), "hi": fleet("hi", "40", quality="0.9")}
    [decision] = assign(jobs=[job("J", [("s1", "lo"), ("s2", "hi")])], fleets=fleets)
    assert decision.site_id == "s2"
    fleets = {"a": fleet("a", "40"), "b": fleet("b", "40")}
    [decision] = assign(jobs=[job("J", [("s9", "b"), ("s1", "a")])], fleets=fleets)
    assert decision.site_id == "s1"


def test_best_bid_wins_and_falls_back_to_an_offer_without_capacity():
    fleets = {"cheap": fleet("cheap", "40"), "other": fleet("other", "40", quality="1")}
    sites = [("c", "cheap"), ("o", "other")]
    [won] = assign(jobs=[job("J", sites, bids=[BidOption("bid", "c", "cheap")])], fleets=fleets)
    assert (won.outcome, won.bid_id, won.site_id) == ("bid", "bid", "c")
    fleets["cheap"] = fleet("cheap", "1")  # the bidder has no room any more
    [fallback] = assign(
        jobs=[job("J", sites, bids=[BidOption("bid", "c", "cheap")])], fleets=fleets
    )
    assert (fallback.outcome, fallback.site_id) == ("offer", "o")


def test_the_cheapest_bid_whose_fleet_has_room_wins():
    fleets = {"full": fleet("full", "1"), "dear": fleet("dear", "40"), "x": fleet("x", "40")}
    sites = [("f", "full"), ("d", "dear"), ("x", "x")]
    bids = [BidOption("cheapest", "f", "full"), BidOption("next", "d", "dear")]
    [decision] = assign(jobs=[job("J", sites, bids=bids)], fleets=fleets)
    assert (decision.outcome, decision.bid_id, decision.fleet_id) == ("bid", "next", "dear")


def test_inactive_fleets_get_nothing():
    [decision] = assign(jobs=[job("J", [("s", "gone")])], fleets={})
    assert decision.outcome == "flag"


def test_random_instances_respect_every_constraint():
    rng = random.Random(3)
    for _ in range(30):
        fleets = {f"F{i}": fleet(f"F{i}", str(rng.randint(1, 12))) for i in range(8)}
        sites = [(f"s{i}", f"F{i % 8}") for i in range(14)]
        jobs = [
            job(
                f"J{k}",
                rng.sample(sites, rng.randint(1, 6)),
                hours=str(rng.choice([1, 2, 3])),
                order=f"o{k // 3}",
                env=k % 3,
            )
            for k in range(30)
        ]
        decisions = assign(jobs=jobs, fleets=fleets, prefer=rng.choice(["score", "headroom"]))
        demand = {j.job_id: j for j in jobs}
        load: dict = {}
        envs: dict = {}
        for d in decisions:
            if d.outcome == "flag":
                continue
            j = demand[d.job_id]
            assert (d.site_id, d.fleet_id) in j.sites
            load[d.fleet_id] = load.get(d.fleet_id, 0) + j.hours
            envs.setdefault((j.order_id, d.site_id), set()).add(j.environment_index)
        assert all(load[f] <= fleets[f].weekly_capacity for f in load)
        assert all(len(e) == 1 for e in envs.values())
        assert len(decisions) == len(jobs)


def test_candidates_given_in_site_order_are_taken_as_given_and_others_sorted():
    from fleets.matching import SitesById

    # given two equal fleets, their sites listed out of site-id order
    fleets = {"F1": fleet("F1", "9"), "F2": fleet("F2", "9")}
    unsorted = [("s2", "F2"), ("s1", "F1")]
    # a plain tuple is sorted: the tie goes to the lowest site id
    (plain,) = assign(jobs=[job("A", unsorted)], fleets=fleets)
    assert plain.site_id == "s1"
    # a SitesById is the selectors' promise of site-id order: taken as it is, not sorted again
    demand = job("A", [])
    given = JobDemand(**{**demand.__dict__, "sites": SitesById(unsorted)})
    (taken,) = assign(jobs=[given], fleets=fleets)
    assert taken.site_id == "s2"
