"""The batch dispatcher's assignment, in memory: data in, decisions out (no database).

The dispatcher (fleets/services/dispatch.py) loads a batch of open jobs with everything the
rules need (each job's eligible sites by capability, site kind, exclusions and the order's
site usage; the fleets' figures and hours already owed; open bids) and asks `assign` where
each job goes. The rules are those of one-job-at-a-time dispatch (fleets/selectors.py,
module docstring), applied as if the jobs were dispatched one after another in the order
chosen here:

- a job goes to a site of an active fleet whose free capacity before the job's deadline
  (weekly capacity x weeks until the deadline - hours owed, counting the jobs placed
  earlier in the batch) covers the job's hours;
- never to a site another environment of the same order uses (diversity, counting the
  batch's own placements); a site this environment already uses is preferred;
- an eligible open bid (the cheapest, then earliest finish) wins over any offer when its
  fleet still has the capacity; bid jobs go first;
- then the most constrained job first (fewest fleets able to take it, then the longest),
  to the best-ranked fleet: by the dispatch score with the headroom as it stands at that
  moment (`prefer="score"`), or by headroom alone (`prefer="headroom"`).

Nothing eligible: the job is flagged, as before.
"""

from dataclasses import dataclass
from decimal import Decimal

W_HEADROOM, W_QUALITY, W_CHEAPNESS, SAME_ENVIRONMENT_BONUS = 0.50, 0.35, 0.15, 1.0


@dataclass(frozen=True)
class FleetState:
    fleet_id: object
    weekly_capacity: Decimal
    owed: Decimal  # hours still owed on jobs it holds (offered, assigned, in progress)
    payout_rate: Decimal
    quality: Decimal


@dataclass(frozen=True)
class BidOption:
    bid_id: object
    site_id: object
    fleet_id: object


@dataclass(frozen=True)
class JobDemand:
    job_id: object
    order_id: object
    environment_index: int
    hours: Decimal
    weeks: Decimal  # weeks until the job's deadline
    sites: tuple  # eligible (site_id, fleet_id) by capability, kind, exclusions, usage
    same_environment_sites: frozenset = frozenset()
    bids: tuple = ()  # BidOption, best first
    rank: tuple = ()  # tie-break between equally constrained jobs (e.g. order, sequence)


@dataclass(frozen=True)
class Decision:
    job_id: object
    outcome: str  # "bid", "offer", "flag"
    site_id: object = None
    fleet_id: object = None
    score: float = 0.0
    bid_id: object = None


def score(
    *,
    hours: Decimal,
    free: Decimal,
    capacity: Decimal,
    quality: Decimal,
    payout_rate: Decimal,
    top_rate: Decimal,
    same_environment: bool,
) -> float:
    """The dispatch score (fleets/selectors.py module docstring)."""
    headroom = float((free - hours) / capacity) if capacity else 0.0
    cheapness = 1.0 - float(payout_rate / top_rate) if top_rate else 1.0
    return (
        W_HEADROOM * max(0.0, min(1.0, headroom))
        + W_QUALITY * float(quality)
        + W_CHEAPNESS * cheapness
        + (SAME_ENVIRONMENT_BONUS if same_environment else 0.0)
    )


class _State:
    def __init__(self, fleets: dict):
        self.fleets = fleets
        self.owed = {fleet_id: f.owed for fleet_id, f in fleets.items()}
        self.usage: dict = {}  # order_id -> {site_id: {environment_index}} placed in the batch

    def free(self, fleet_id, weeks: Decimal) -> Decimal:
        return self.fleets[fleet_id].weekly_capacity * weeks - self.owed[fleet_id]

    def site_open(self, job: JobDemand, site_id) -> bool:
        envs = self.usage.get(job.order_id, {}).get(site_id)
        return not envs or envs == {job.environment_index}

    def take(self, job: JobDemand, site_id, fleet_id) -> None:
        self.owed[fleet_id] += job.hours
        self.usage.setdefault(job.order_id, {}).setdefault(site_id, set()).add(
            job.environment_index
        )


def _constrainedness(job: JobDemand) -> tuple:
    fleets = len({fleet_id for _, fleet_id in job.sites})
    return (0 if job.bids else 1, fleets, -job.hours, job.rank, str(job.job_id))


def assign(
    *, jobs: list[JobDemand], fleets: dict, prefer: str = "score", order: str = "constrained"
) -> list[Decision]:
    """Where each job goes, in the order the decisions were taken.

    fleets: fleet_id -> FleetState (active fleets only). `JobDemand.sites` already leaves out
    what the database says (other environments' sites, excluded fleets); the batch's own
    placements are tracked here. order="given" keeps the jobs' order (the greedy
    one-at-a-time dispatch, for comparison); prefer: "score" or "headroom" (module docstring).
    """
    state = _State(fleets)
    ordered = list(jobs) if order == "given" else sorted(jobs, key=_constrainedness)
    decisions = []
    for job in ordered:
        decision = _bid_decision(job, state) or _offer_decision(job, state, prefer)
        if decision.outcome != "flag":
            state.take(job, decision.site_id, decision.fleet_id)
        decisions.append(decision)
    return decisions


def _bid_decision(job: JobDemand, state: _State) -> Decision | None:
    """Only the best eligible bid is tried (as one-job dispatch does); None: offer instead."""
    if not job.bids:
        return None
    bid = job.bids[0]
    if bid.fleet_id not in state.fleets or not state.site_open(job, bid.site_id):
        return None
    if state.free(bid.fleet_id, job.weeks) < job.hours:
        return None
    return Decision(job.job_id, "bid", bid.site_id, bid.fleet_id, bid_id=bid.bid_id)


def _offer_decision(job: JobDemand, state: _State, prefer: str) -> Decision:
    feasible = []
    for site_id, fleet_id in job.sites:
        if fleet_id not in state.fleets or not state.site_open(job, site_id):
            continue
        free = state.free(fleet_id, job.weeks)
        if free >= job.hours:
            feasible.append((site_id, fleet_id, free))
    if not feasible:
        return Decision(job.job_id, "flag")
    top_rate = max(state.fleets[f].payout_rate for _, f, _ in feasible)
    best, best_key = None, None
    for site_id, fleet_id, free in feasible:
        fleet = state.fleets[fleet_id]
        capacity = fleet.weekly_capacity * job.weeks
        same = site_id in job.same_environment_sites or _used_by_environment(job, state, site_id)
        value = score(
            hours=job.hours,
            free=free,
            capacity=capacity,
            quality=fleet.quality,
            payout_rate=fleet.payout_rate,
            top_rate=top_rate,
            same_environment=same,
        )
        rank = float(free - job.hours) if prefer == "headroom" else value
        key = (same, rank, value)
        # ties break on the site id, as in one-job dispatch
        if best_key is None or key > best_key or (key == best_key and str(site_id) < best[0]):
            best, best_key = (str(site_id), site_id, fleet_id, value), key
    _, site_id, fleet_id, value = best
    return Decision(job.job_id, "offer", site_id, fleet_id, score=value)


def _used_by_environment(job: JobDemand, state: _State, site_id) -> bool:
    return job.environment_index in state.usage.get(job.order_id, {}).get(site_id, ())


def placed_hours(jobs: list[JobDemand], decisions: list[Decision]) -> Decimal:
    hours = {job.job_id: job.hours for job in jobs}
    return sum((hours[d.job_id] for d in decisions if d.outcome != "flag"), Decimal(0))
