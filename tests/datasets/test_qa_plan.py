"""The collection plan's QA decision (datasets/qa_plan.py), from plain values: binding of an
environment's site, scene and object slots; each refusal with its code."""

from datetime import UTC, datetime, timedelta
from decimal import Decimal

from datasets import qa_plan
from datasets.qa_plan import Calibration, Cell, EpisodeFacts, PlanRules, SiteObject, decide

NOW = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)
MUG = SiteObject("o-mug", "mug", "kitchenware")
CUP = SiteObject("o-cup", "cup", "kitchenware")
BOLT = SiteObject("o-bolt", "bolt", "hardware")


def grid(bound=None, environments=2, objects=2, target="100") -> list[Cell]:
    """Unbound cells; bound={(env, slot): dict(site_id=..., scene_id=..., object_id=...)}."""
    return [
        Cell(e, o, Decimal(target), **(bound or {}).get((e, o), {}))
        for e in range(environments)
        for o in range(objects)
    ]


def facts(**kw) -> EpisodeFacts:
    values = dict(
        environment_index=0,
        site_id="S1",
        robot_id="R1",
        duration_seconds=Decimal("10"),
        registered_at=NOW,
        first_object="mug",
        site_object=MUG,
    )
    values.update(kw)
    return EpisodeFacts(**values)


def test_the_first_episode_binds_the_site_and_the_first_free_slot():
    decision = decide(rules=PlanRules(), cells=grid(), episode=facts())
    assert decision.passed
    assert decision.cell == (0, 0)
    assert (decision.bind_site, decision.bind_object, decision.bind_scene) == (True, True, False)


def test_an_object_already_bound_counts_in_its_cell_and_binds_nothing():
    cells = grid(
        {
            (0, 0): dict(site_id="S1", object_id="o-cup"),
            (0, 1): dict(site_id="S1", object_id="o-mug"),
        }
    )
    decision = decide(rules=PlanRules(), cells=cells, episode=facts())
    assert decision.passed and decision.cell == (0, 1)
    assert not decision.bind_site and not decision.bind_object


def test_a_new_object_takes_the_next_free_slot():
    cells = grid({(0, 0): dict(site_id="S1", object_id="o-cup")})
    decision = decide(rules=PlanRules(), cells=cells, episode=facts())
    assert decision.cell == (0, 1) and decision.bind_object and not decision.bind_site


def test_a_third_object_in_a_full_environment_is_not_in_the_plan():
    cells = grid(
        {
            (0, 0): dict(site_id="S1", object_id="o-cup"),
            (0, 1): dict(site_id="S1", object_id="o-bolt"),
        }
    )
    decision = decide(rules=PlanRules(), cells=cells, episode=facts())
    assert decision.code == qa_plan.OBJECT_NOT_IN_PLAN


def test_an_object_not_registered_or_inactive_or_unnamed_is_not_in_the_plan():
    for episode in (
        facts(site_object=None),
        facts(site_object=SiteObject("o-mug", "mug", active=False)),
        facts(first_object=None, site_object=None),
    ):
        assert decide(rules=PlanRules(), cells=grid(), episode=episode).code == (
            qa_plan.OBJECT_NOT_IN_PLAN
        )


def test_an_object_of_another_category_is_not_in_the_plan():
    rules = PlanRules(object_categories=("kitchenware",))
    assert decide(rules=rules, cells=grid(), episode=facts()).passed
    refused = decide(
        rules=rules, cells=grid(), episode=facts(first_object="bolt", site_object=BOLT)
    )
    assert refused.code == qa_plan.OBJECT_NOT_IN_PLAN


def test_another_site_for_a_bound_environment_or_a_site_of_another_environment_is_refused():
    bound = grid({(0, 0): dict(site_id="S1"), (0, 1): dict(site_id="S1")})
    assert decide(rules=PlanRules(), cells=bound, episode=facts(site_id="S2")).code == (
        qa_plan.OBJECT_NOT_IN_PLAN
    )
    other = grid({(1, 0): dict(site_id="S1"), (1, 1): dict(site_id="S1")})
    assert decide(rules=PlanRules(), cells=other, episode=facts()).code == (
        qa_plan.OBJECT_NOT_IN_PLAN
    )


def test_reusing_an_object_refused_only_when_the_distinct_target_would_be_out_of_reach():
    # given: environment 1 bound the mug in one of its two slots (4 cells in all)
    cells = grid({(1, 0): dict(site_id="S1", object_id="o-mug", scene_id="A")})
    rules = PlanRules(environment_unit="scene")
    episode = facts(scene_id="B", scene_site_id="S1")
    # then: 4 distinct objects needed, 1 bound, 3 slots left: reusing the mug leaves 3 at most
    refused = decide(
        rules=PlanRules(environment_unit="scene", distinct_objects=4), cells=cells, episode=episode
    )
    assert refused.code == qa_plan.OBJECT_NOT_IN_PLAN
    # and: 3 distinct are still reachable after reusing it; no target: reuse is fine
    assert decide(
        rules=PlanRules(environment_unit="scene", distinct_objects=3), cells=cells, episode=episode
    ).passed
    assert decide(rules=rules, cells=cells, episode=episode).passed
    # and: a new object is never refused for the target
    assert decide(
        rules=PlanRules(environment_unit="scene", distinct_objects=4),
        cells=cells,
        episode=facts(scene_id="B", scene_site_id="S1", first_object="cup", site_object=CUP),
    ).passed


def test_scene_mode_needs_a_scene_of_the_site_not_used_by_another_environment():
    rules = PlanRules(environment_unit="scene")
    assert decide(rules=rules, cells=grid(), episode=facts()).code == qa_plan.SCENE_NOT_IN_PLAN
    assert (
        decide(rules=rules, cells=grid(), episode=facts(scene_id="A", scene_site_id="S9")).code
        == qa_plan.SCENE_NOT_IN_PLAN
    )
    taken = grid({(1, 0): dict(site_id="S1", scene_id="A")})
    assert (
        decide(rules=rules, cells=taken, episode=facts(scene_id="A", scene_site_id="S1")).code
        == qa_plan.SCENE_NOT_IN_PLAN
    )
    # two environments share a site when each has its own scene
    decision = decide(rules=rules, cells=taken, episode=facts(scene_id="B", scene_site_id="S1"))
    assert decision.passed and decision.bind_scene and decision.bind_site
    bound = grid({(0, 0): dict(site_id="S1", scene_id="B")})
    assert (
        decide(rules=rules, cells=bound, episode=facts(scene_id="C", scene_site_id="S1")).code
        == qa_plan.SCENE_NOT_IN_PLAN
    )


def test_a_cell_is_full_past_its_maximum_share():
    # target 100 s x 150 % = 150 s
    cells = grid({(0, 0): dict(site_id="S1", object_id="o-mug", accepted_seconds=Decimal(140))})
    assert decide(rules=PlanRules(), cells=cells, episode=facts()).passed  # 150 exactly
    refused = decide(
        rules=PlanRules(), cells=cells, episode=facts(duration_seconds=Decimal("10.001"))
    )
    assert refused.code == qa_plan.CELL_FULL


def calibrated(**kw) -> PlanRules:
    return PlanRules(calibrated_cameras=True, cameras=("wrist", "top"), **kw)


def calibration(camera, robot="R1", days=1) -> Calibration:
    return Calibration(f"c-{camera}", robot, camera, NOW - timedelta(days=days))


def test_every_camera_needs_a_calibration_of_the_episodes_robot():
    both = {"wrist": calibration("wrist"), "top": calibration("top")}
    assert decide(rules=calibrated(), cells=grid(), episode=facts(calibrations=both)).passed
    for calibrations in (
        {"wrist": calibration("wrist")},
        {"wrist": calibration("wrist"), "top": calibration("top", robot="R2")},
        {"wrist": calibration("wrist"), "top": calibration("wrist")},
    ):
        assert (
            decide(rules=calibrated(), cells=grid(), episode=facts(calibrations=calibrations)).code
            == qa_plan.CALIBRATION_MISSING
        )
    # an order without calibrated cameras checks none
    assert decide(rules=PlanRules(cameras=("wrist",)), cells=grid(), episode=facts()).passed


def test_a_calibration_too_old_or_before_the_scene_was_arranged_is_stale():
    rules = calibrated(calibration_max_age_days=30)
    old = {"wrist": calibration("wrist", days=31), "top": calibration("top")}
    assert decide(rules=rules, cells=grid(), episode=facts(calibrations=old)).code == (
        qa_plan.CALIBRATION_STALE
    )
    recent = {"wrist": calibration("wrist", days=29), "top": calibration("top", days=2)}
    assert decide(rules=rules, cells=grid(), episode=facts(calibrations=recent)).passed
    moved = facts(
        calibrations=recent,
        scene_id="A",
        scene_site_id="S1",
        scene_arranged_at=NOW - timedelta(days=1, hours=12),
    )
    assert decide(rules=rules, cells=grid(), episode=moved).code == qa_plan.CALIBRATION_STALE


def test_a_shortfall_job_takes_its_cells_object_only():
    cells = grid(
        {
            (0, 0): dict(site_id="S1", object_id="o-cup"),
            (0, 1): dict(site_id="S1", object_id="o-mug"),
        }
    )
    assert decide(rules=PlanRules(), cells=cells, episode=facts(only_slot=1)).cell == (0, 1)
    refused = decide(rules=PlanRules(), cells=cells, episode=facts(only_slot=0))
    assert refused.code == qa_plan.OBJECT_NOT_IN_PLAN


def test_every_code_is_a_registered_reason_with_words_for_the_pages():
    from datasets.qa_checks import Reason
    from portal.wording import QA_REASONS

    assert set(qa_plan.CODES) <= set(QA_REASONS)
    assert set(qa_plan.CODES) <= {v for k, v in vars(Reason).items() if k.isupper()}
