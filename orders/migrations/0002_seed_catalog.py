"""Seed a sensible catalog: the complexity rubric, task types, embodiments, sensors and
rate card v1. Staff edit all of it in the admin afterwards (a new rate card version for
price changes)."""

from datetime import UTC, datetime
from decimal import Decimal

from django.db import migrations

LEVELS = [
    (
        1,
        "Rigid pick-and-place",
        "Single rigid objects picked and placed; generous tolerances; no tools.",
        "Bin picking, moving blocks, sorting parcels by size",
        "1.000",
    ),
    (
        2,
        "Multi-step rigid",
        "Sequences of rigid-object steps with ordering constraints or light occlusion.",
        "Stacking, setting a table, loading a tray",
        "1.300",
    ),
    (
        3,
        "Tool use / precise placement",
        "A held tool acts on the scene, or placement within a few millimetres.",
        "Scooping, pouring, hanging a mug on a hook",
        "1.700",
    ),
    (
        4,
        "Contact-rich",
        "Force matters: insertion, wiping, pressing, assembly with friction and slip.",
        "Peg-in-hole, cable routing, wiping a table, snapping parts together",
        "2.200",
    ),
    (
        5,
        "Deformable or dexterous in-hand",
        "Cloth, bags, food, cables as deformables, or in-hand reorientation.",
        "Folding laundry, bagging groceries, in-hand pen rotation",
        "3.000",
    ),
]

TASK_TYPES = [
    (
        "bin-picking",
        "Bin picking",
        "Pick items from a cluttered bin and place them in a tote.",
        "pick_and_place",
        False,
        1,
    ),
    (
        "shelf-restocking",
        "Shelf restocking",
        "Take products from a cart and face them on a retail shelf.",
        "logistics",
        False,
        2,
    ),
    (
        "table-setting",
        "Table setting",
        "Lay plates, cutlery and glasses in a fixed arrangement.",
        "household",
        False,
        2,
    ),
    (
        "dishwasher-loading",
        "Dishwasher loading",
        "Load dishes into racks without collisions.",
        "household",
        True,
        3,
    ),
    (
        "pouring",
        "Pouring",
        "Pour granular material or liquid to a target level.",
        "tool_use",
        False,
        3,
    ),
    (
        "peg-insertion",
        "Peg-in-hole insertion",
        "Insert pegs and connectors with tight clearances.",
        "assembly",
        True,
        4,
    ),
    (
        "surface-wiping",
        "Surface wiping",
        "Wipe a spill off a surface with a cloth or sponge.",
        "household",
        True,
        4,
    ),
    (
        "cable-routing",
        "Cable routing",
        "Route a cable through clips along a path.",
        "assembly",
        True,
        4,
    ),
    (
        "cloth-folding",
        "Cloth folding",
        "Flatten and fold towels and garments.",
        "deformable",
        True,
        5,
    ),
    (
        "in-hand-reorientation",
        "In-hand reorientation",
        "Rotate an object in the hand to a target pose.",
        "dexterous",
        True,
        5,
    ),
]

# slug, name, description, arms, action_dim, base hourly rate (USD)
EMBODIMENTS = [
    (
        "franka-fr3",
        "Franka Research 3 + parallel gripper",
        "7-DoF arm, joint positions + gripper.",
        1,
        8,
        "180.00",
    ),
    (
        "ur5e",
        "Universal Robots UR5e + gripper",
        "6-DoF industrial arm, joint positions + gripper.",
        1,
        7,
        "160.00",
    ),
    (
        "so100",
        "SO-100 low-cost arm",
        "5-DoF hobby arm with gripper, LeRobot's reference arm.",
        1,
        6,
        "90.00",
    ),
    ("aloha-bimanual", "ALOHA bimanual", "Two 6-DoF arms with grippers.", 2, 14, "260.00"),
    (
        "mobile-manipulator",
        "Mobile manipulator",
        "Wheeled base (3) + 7-DoF arm + gripper.",
        1,
        11,
        "300.00",
    ),
    ("dexterous-hand", "Arm with dexterous hand", "7-DoF arm + 16-DoF hand.", 1, 23, "420.00"),
]

# slug, name, description, hourly rate (USD)
SENSORS = [
    ("wrist-camera", "Wrist RGB camera", "A camera on the end effector, 30 fps.", "10.00"),
    ("rgbd-camera", "Extra RGB-D camera", "An additional external depth camera view.", "15.00"),
    ("force-torque", "Wrist force/torque sensor", "6-axis F/T at the flange, 500 Hz.", "25.00"),
    ("tactile", "Tactile fingertips", "Tactile arrays on the gripper fingers.", "40.00"),
]

VOLUME_TIERS = [("100", "5.00"), ("500", "10.00"), ("2000", "15.00")]


def seed(apps, schema_editor):
    ComplexityLevel = apps.get_model("orders", "ComplexityLevel")
    TaskType = apps.get_model("orders", "TaskType")
    Embodiment = apps.get_model("orders", "Embodiment")
    SensorAddon = apps.get_model("orders", "SensorAddon")
    RateCard = apps.get_model("orders", "RateCard")

    levels = {}
    for level, name, description, examples, _ in LEVELS:
        levels[level] = ComplexityLevel.objects.create(
            level=level, name=name, description=description, examples=examples
        )
    for slug, name, description, category, contact_rich, level in TASK_TYPES:
        TaskType.objects.create(
            slug=slug,
            name=name,
            description=description,
            category=category,
            contact_rich=contact_rich,
            default_complexity=levels[level],
        )
    card = RateCard.objects.create(
        version=1,
        effective_from=datetime(2026, 1, 1, tzinfo=UTC),
        currency="USD",
        included_environments=1,
        extra_environment_fee=Decimal("150.00"),
        rush_surcharge_percent=Decimal("25.00"),
        standard_lead_days=28,
        rush_lead_days=7,
        quote_validity_hours=72,
        notes="Launch rate card.",
    )
    for slug, name, description, arms, action_dim, rate in EMBODIMENTS:
        embodiment = Embodiment.objects.create(
            slug=slug, name=name, description=description, arms=arms, action_dim=action_dim
        )
        card.embodiment_rates.create(embodiment=embodiment, hourly_rate=Decimal(rate))
    for slug, name, description, rate in SENSORS:
        sensor = SensorAddon.objects.create(slug=slug, name=name, description=description)
        card.sensor_rates.create(sensor=sensor, hourly_rate=Decimal(rate))
    for level, *_, multiplier in LEVELS:
        card.complexity_multipliers.create(level=levels[level], multiplier=Decimal(multiplier))
    for min_hours, percent in VOLUME_TIERS:
        card.volume_tiers.create(min_hours=Decimal(min_hours), discount_percent=Decimal(percent))


def unseed(apps, schema_editor):
    apps.get_model("orders", "RateCard").objects.filter(version=1).delete()
    apps.get_model("orders", "TaskType").objects.filter(
        slug__in=[t[0] for t in TASK_TYPES]
    ).delete()
    apps.get_model("orders", "Embodiment").objects.filter(
        slug__in=[e[0] for e in EMBODIMENTS]
    ).delete()
    apps.get_model("orders", "SensorAddon").objects.filter(
        slug__in=[s[0] for s in SENSORS]
    ).delete()
    apps.get_model("orders", "ComplexityLevel").objects.filter(
        level__in=[lv[0] for lv in LEVELS]
    ).delete()


class Migration(migrations.Migration):
    dependencies = [("orders", "0001_initial")]

    operations = [migrations.RunPython(seed, unseed)]
