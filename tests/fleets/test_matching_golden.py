"""The matcher's decisions pinned: fleets/matching.assign takes, on each of the golden set's
seeded random instances (tests/fleets/matching_golden.py), with both preferences, exactly the
decisions, scores and rates stored in tests/fleets/matching_golden.json."""

import json

import pytest

from tests.fleets.matching_golden import GOLDEN, INSTANCES, PREFERENCES, decided

CASES = json.loads(GOLDEN.read_text())


def test_the_golden_set_is_whole_and_covers_every_outcome():
    assert len(CASES) == INSTANCES
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
