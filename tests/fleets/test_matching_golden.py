"""The matcher's decisions pinned: fleets/matching.assign takes, on each of the golden set's
seeded random instances (tests/fleets/matching_golden.py), with both preferences, exactly the
decisions, scores and rates stored in tests/fleets/matching_golden.json."""

import json

import pytest

from tests.fleets.matching_golden import (
    GOLDEN,
    INSTANCES,
    PREFERENCES,
    SCENE_INSTANCES,
    decided,
)

CASES = json.loads(GOLDEN.read_text())


def test_the_golden_set_is_whole_and_covers_every_outcome():
    assert len(CASES) == INSTANCES + SCENE_INSTANCES
    outcomes = {row[1] for case in CASES for rows in case["decisions"].values() for row in rows}
    assert outcomes == {"bid", "offer", "flag"}


@pytest.mark.parametrize("prefer", PREFERENCES)
def test_the_matcher_reproduces_every_golden_decision_exactly(prefer):
    differing = [
        index
        for index, case in enumerate(CASES)
        if decided(case["instance"], prefer) != case["decisions"][prefer]
    ]
    assert differing == [], f"{len(differing)} instances decided otherwise, first {differing[:5]}"


def test_environments_share_a_site_only_within_its_free_scenes():
    """Mutation: shared_site_open ignoring scene_slots (one environment per site) leaves no
    shared site; counting `<=` instead of `<` puts more environments than scenes."""
    shared = 0
    for case in CASES:
        jobs = {job["job_id"]: job for job in case["instance"]["jobs"]}
        for prefer in PREFERENCES:
            placed: dict = {}
            for job_id, outcome, site, *_ in case["decisions"][prefer]:
                if outcome != "flag":
                    job = jobs[job_id]
                    key = (job["order_id"], site)
                    placed.setdefault(key, (set(), job.get("scene_slots")))[0].add(
                        job["environment_index"]
                    )
            for (_, site), (environments, slots) in placed.items():
                assert len(environments) <= (slots[site] if slots else 1)
                shared += len(environments) > 1
    assert shared > 0
