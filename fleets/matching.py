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
  batch's own placements); a site this environment already uses is preferred; for an order
  planned by distinct scenes (issue 30) a site takes as many environments as it has free
  scenes (`JobDemand.scene_slots`);
- an eligible open bid wins over any offer: the cheapest (then earliest finish) of those
  whose fleet has the capacity; bid jobs go first;
- then the most constrained job first (fewest fleets able to take it, then the longest),
  to the best-ranked fleet: by the dispatch score with the headroom as it stands at that
  moment (`prefer="score"`), or by headroom alone (`prefer="headroom"`);
- only fleets the pay rule allows (fleets/services/pay_terms.py: paid in the job's currency,
  at a rate at most what the job pays; a re-collection's original fleet at its original
  rate), ranked on the rate each would be offered: the score's cheapness compares amounts in
  one currency that the fleets would actually be paid. The chosen fleet's rate is decided
  exactly (Decimal) by the rule itself and carried on the decision.

Nothing eligible: the job is flagged, as before.
"""

import uuid
from dataclasses import dataclass
from decimal import Decimal

import numpy as np

from fleets.services.pay_terms import PayTerms, offered_rate

W_HEADROOM, W_QUALITY, W_CHEAPNESS, SAME_ENVIRONMENT_BONUS = 0.50, 0.35, 0.15, 1.0


@dataclass(frozen=True)
class FleetState:
    fleet_id: object
    weekly_capacity: Decimal
    owed: Decimal  # hours still owed on jobs it holds (offered, assigned, in progress)
    payout_rate: Decimal
    quality: Decimal
    currency: str = "USD"


@dataclass(frozen=True)
class BidOption:
    bid_id: object
    site_id: object
    fleet_id: object


class SitesById(tuple):
    """(site_id, fleet_id) pairs already in site-id order (fleets/selectors.py builds them so):
    the matcher takes them as they are instead of sorting every candidate list again."""

    __slots__ = ()


@dataclass(frozen=True)
class JobDemand:
    job_id: object
    order_id: object
    environment_index: int
    hours: Decimal
    weeks: Decimal  # weeks until the job's deadline
    # eligible (site_id, fleet_id) by capability, kind, exclusions, usage (a SitesById: as given)
    sites: tuple
    same_environment_sites: frozenset = frozenset()
    bids: tuple = ()  # BidOption, best first (each allowed by the pay rule)
    rank: tuple = ()  # tie-break between equally constrained jobs (e.g. order, sequence)
    terms: PayTerms | None = None  # what the job pays (None: no pay rule, the pure tests only)
    # An order planned by distinct scenes (issue 30): site -> how many more of the order's
    # environments it can host (its free scenes); None: an environment is a site (one each).
    scene_slots: dict | None = None


@dataclass(frozen=True)
class Decision:
    job_id: object
    outcome: str  # "bid", "offer", "flag"
    site_id: object = None
    fleet_id: object = None
    score: float = 0.0
    bid_id: object = None
    rate: Decimal | None = None  # an offer's rate per hour, as the pay rule decided it


class _State:
    """Fleet figures as arrays (one index per fleet), the hours owed as the batch places jobs
    (exact Decimal, with a float copy for the vectorised ranking), and the batch's own site
    usage per order."""

    def __init__(self, fleets: dict):
        self.fleets = fleets
        self.index = {fleet_id: i for i, fleet_id in enumerate(fleets)}
        values = list(fleets.values())
        self.weekly = np.array([float(f.weekly_capacity) for f in values])
        self.rate = np.array([float(f.payout_rate) for f in values])
        self.quality = np.array([float(f.quality) for f in values])
        self.currency_codes: dict = {}  # currency -> a small int, for the vectorised check
        self.currency = np.array(
            [self.currency_codes.setdefault(f.currency, len(self.currency_codes)) for f in values],
            dtype=np.int64,
        )
        self.owed_float = np.array([float(f.owed) for f in values])
        self.owed = {fleet_id: f.owed for fleet_id, f in fleets.items()}
        self.usage: dict = {}  # order_id -> {site_id: {environment_index}} placed in the batch
        self._arrays: dict = {}

    def free(self, fleet_id, weeks: Decimal) -> Decimal:
        return self.fleets[fleet_id].weekly_capacity * weeks - self.owed[fleet_id]

    def site_open(self, job: JobDemand, site_id) -> bool:
        return shared_site_open(job, site_id, self.usage.get(job.order_id, {}).get(site_id))

    def take(self, job: JobDemand, site_id, fleet_id) -> None:
        self.owed[fleet_id] += job.hours
        self.owed_float[self.index[fleet_id]] += float(job.hours)
        self.usage.setdefault(job.order_id, {}).setdefault(site_id, set()).add(
            job.environment_index
        )

    def arrays(self, sites: tuple) -> "_Candidates":
        """A candidate list's arrays, computed once per list (jobs alike share theirs);
        inactive fleets' sites left out."""
        cached = self._arrays.get(id(sites))
        if cached is None or cached[0] is not sites:
            kept = [(s, f) for s, f in sites if f in self.index]
            if not isinstance(sites, SitesById):
                kept.sort(key=site_order)
            fleet_index = np.array([self.index[f] for _, f in kept], dtype=np.int64)
            cached = (
                sites,
                _Candidates(
                    kept=kept,
                    fleet_index=fleet_index,
                    positions={s: i for i, (s, _) in enumerate(kept)},
                    weekly=self.weekly[fleet_index],
                    rate=self.rate[fleet_index],
                    currency=self.currency[fleet_index],
                    quality_term=W_QUALITY * self.quality[fleet_index],
                ),
            )
            self._arrays[id(sites)] = cached
        return cached[1]


@dataclass(frozen=True)
class _Candidates:
    """One candidate list as the ranking reads it: the (site, fleet) pairs kept, in site-id
    order, each one's fleet index and position, and what of its fleet the batch does not
    change (weekly capacity, rate, the score's quality term), gathered once per list; only
    the hours owed are gathered per job."""

    kept: list
    fleet_index: np.ndarray
    positions: dict
    weekly: np.ndarray
    rate: np.ndarray
    currency: np.ndarray
    quality_term: np.ndarray


def shared_site_open(job: JobDemand, site_id, envs) -> bool:
    """Whether the batch may place the job at a site where it placed jobs of these
    environments of the order: none, or only this one; or, counting scenes, fewer other
    environments than the site has free scenes."""
    if not envs or envs == {job.environment_index}:
        return True
    if job.scene_slots is None:
        return False
    return len(envs - {job.environment_index}) < job.scene_slots.get(site_id, 0)


def id_order(value):
    """Sort key of an id as its text sorts. A UUID's 128-bit integer sorts exactly as its
    fixed-width hex text and costs nothing to get, where str() formats it anew each time."""
    return value.int if isinstance(value, uuid.UUID) else str(value)


def site_order(pair: tuple):
    """Sort key of a (site_id, fleet_id) pair: by site id (the lowest wins a tie)."""
    return id_order(pair[0])


def _constrainedness_key(jobs: list[JobDemand]):
    """Bid jobs first, then fewest fleets able to take the job, longest, by rank."""
    fleet_counts: dict = {}

    def key(job: JobDemand) -> tuple:
        fleets = fleet_counts.get(id(job.sites))
        if fleets is None:
            fleets = fleet_counts[id(job.sites)] = len({f for _, f in job.sites})
        return (0 if job.bids else 1, fleets, -job.hours, job.rank, id_order(job.job_id))

    return key


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
    ordered = list(jobs) if order == "given" else sorted(jobs, key=_constrainedness_key(jobs))
    decisions = []
    for job in ordered:
        decision = _bid_decision(job, state) or _offer_decision(job, state, prefer)
        if decision.outcome != "flag":
            state.take(job, decision.site_id, decision.fleet_id)
        decisions.append(decision)
    return decisions


def _bid_decision(job: JobDemand, state: _State) -> Decision | None:
    """The best eligible bid whose fleet has the capacity (as one-job dispatch, which ranks
    only bids on sites that pass its capacity filter); None: an offer instead."""
    for bid in job.bids:
        if bid.fleet_id not in state.fleets or not state.site_open(job, bid.site_id):
            continue
        if state.free(bid.fleet_id, job.weeks) >= job.hours:
            return Decision(job.job_id, "bid", bid.site_id, bid.fleet_id, bid_id=bid.bid_id)
    return None


def _offer_decision(job: JobDemand, state: _State, prefer: str) -> Decision:
    """The best-ranked feasible site, vectorised over the job's candidates. Feasibility is
    decided exactly (Decimal): the float pre-check only has a tolerance, and the chosen
    site is checked again before it is taken."""
    candidates = state.arrays(job.sites)
    kept, positions = candidates.kept, candidates.positions
    if not kept:
        return Decision(job.job_id, "flag")
    hours = float(job.hours)
    capacity = candidates.weekly * float(job.weeks)
    free = capacity - state.owed_float[candidates.fleet_index]
    ok = free >= hours - 1e-6
    rate = _offered_rates(job, state, candidates, ok)
    same = np.zeros(len(kept), dtype=bool)
    for site_id in job.same_environment_sites:
        if site_id in positions:
            same[positions[site_id]] = True
    for site_id, envs in state.usage.get(job.order_id, {}).items():
        position = positions.get(site_id)
        if position is None:
            continue
        if not shared_site_open(job, site_id, envs):
            ok[position] = False  # another environment of the order holds it (its scenes)
        else:
            same[position] = True
    while ok.any():
        value = _scores(candidates, rate, ok, free, capacity, hours, same)
        if prefer == "headroom":
            spare = free - hours
            rank = np.where(same, 2.0, 0.0) + spare / (1.0 + np.abs(spare).max())
        else:
            rank = value
        i = int(np.argmax(np.where(ok, rank, -np.inf)))  # first of equals: lowest site id
        site_id, fleet_id = kept[i]
        paid = _exact_rate(job, state.fleets[fleet_id])
        if paid is not False and state.free(fleet_id, job.weeks) >= job.hours:
            return Decision(
                job.job_id, "offer", site_id, fleet_id, score=float(value[i]), rate=paid
            )
        ok[i] = False
    return Decision(job.job_id, "flag")


def _offered_rates(job: JobDemand, state: _State, candidates: _Candidates, ok) -> np.ndarray:
    """The rate each candidate would be offered, as floats for the ranking; `ok` loses the
    candidates the pay rule refuses (another currency, a rate above what the job pays). The
    re-collection's original fleet is ranked at its original rate (the job's ceiling)."""
    terms = job.terms
    if terms is None:
        return candidates.rate
    original = state.index.get(terms.original_fleet_id, -1)
    allowed, rate = terms.offer_arrays(
        same_currency=candidates.currency == state.currency_codes.get(terms.currency, -1),
        rates=candidates.rate,
        original=candidates.fleet_index == original,
    )
    ok &= allowed
    return rate


def _exact_rate(job: JobDemand, fleet: FleetState):
    """The offer's rate by the pay rule itself (Decimal); False where it refuses the fleet (the
    float pre-check above only prunes)."""
    if job.terms is None:
        return fleet.payout_rate
    paid = offered_rate(
        terms=job.terms,
        fleet_id=fleet.fleet_id,
        fleet_currency=fleet.currency,
        fleet_rate=fleet.payout_rate,
    )
    return False if paid is None else paid


def _scores(candidates: _Candidates, rate, ok, free, capacity, hours, same) -> np.ndarray:
    """The dispatch score of every candidate (fleets/selectors.py module docstring), on the
    rates they would be offered."""
    top_rate = rate[ok].max()
    with np.errstate(divide="ignore", invalid="ignore"):
        headroom = np.where(capacity > 0, (free - hours) / capacity, 0.0)
    cheapness = 1.0 - rate / top_rate if top_rate else np.ones(len(rate))
    return (
        W_HEADROOM * np.clip(headroom, 0.0, 1.0)
        + candidates.quality_term
        + W_CHEAPNESS * cheapness
        + np.where(same, SAME_ENVIRONMENT_BONUS, 0.0)
    )


def placed_hours(jobs: list[JobDemand], decisions: list[Decision]) -> Decimal:
    hours = {job.job_id: job.hours for job in jobs}
    return sum((hours[d.job_id] for d in decisions if d.outcome != "flag"), Decimal(0))
