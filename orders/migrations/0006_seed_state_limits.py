"""Seed realistic state limits (content QA, issue 16) for the seeded embodiments, per state
element [low, high] in its unit: joints in rad, grippers in m (ALOHA's normalised 0..1, as its
recorders report), a mobile base's velocities in m/s and rad/s. Sources: the manufacturers'
joint ranges (Franka FR3 datasheet, UR5e, Interbotix ViperX 300 for ALOHA, Allegro hand)."""

from django.db import migrations

FR3_ARM = [
    [-2.7437, 2.7437],
    [-1.7837, 1.7837],
    [-2.9007, 2.9007],
    [-3.0421, -0.1518],
    [-2.8065, 2.8065],
    [0.5445, 4.5169],
    [-3.0159, 3.0159],
]
FRANKA_GRIPPER = [[0.0, 0.08]]  # finger opening, m
VIPERX_ARM = [
    [-3.1416, 3.1416],  # waist
    [-1.8850, 1.9897],  # shoulder
    [-2.1468, 1.6057],  # elbow
    [-3.1416, 3.1416],  # forearm roll
    [-1.7453, 2.1468],  # wrist angle
    [-3.1416, 3.1416],  # wrist rotate
]
ALLEGRO_FINGER = [[-0.47, 0.47], [-0.196, 1.61], [-0.174, 1.709], [-0.227, 1.618]]
ALLEGRO_THUMB = [[0.263, 1.396], [-0.105, 1.163], [-0.189, 1.644], [-0.162, 1.719]]

STATE_LIMITS = {
    "franka-fr3": FR3_ARM + FRANKA_GRIPPER,
    "ur5e": [
        [-6.2832, 6.2832],
        [-6.2832, 6.2832],
        [-3.1416, 3.1416],  # elbow: +-180 deg
        [-6.2832, 6.2832],
        [-6.2832, 6.2832],
        [-6.2832, 6.2832],
        [0.0, 0.085],  # Robotiq 2F-85 opening, m
    ],
    "so100": [
        [-2.0, 2.0],  # shoulder pan
        [-1.9, 1.9],  # shoulder lift
        [-1.75, 1.75],  # elbow flex
        [-1.75, 1.75],  # wrist flex
        [-2.8, 2.8],  # wrist roll
        [-0.2, 1.75],  # jaw, rad
    ],
    "aloha-bimanual": VIPERX_ARM + [[0.0, 1.0]] + VIPERX_ARM + [[0.0, 1.0]],
    "mobile-manipulator": [[-1.5, 1.5], [-1.5, 1.5], [-2.0, 2.0]] + FR3_ARM + FRANKA_GRIPPER,
    "dexterous-hand": FR3_ARM + ALLEGRO_FINGER * 3 + ALLEGRO_THUMB,
}


def seed(apps, schema_editor):
    Embodiment = apps.get_model("orders", "Embodiment")
    for slug, limits in STATE_LIMITS.items():
        for embodiment in Embodiment.objects.filter(slug=slug, state_limits=[]):
            if embodiment.action_dim == len(limits):
                embodiment.state_limits = limits
                embodiment.save(update_fields=["state_limits"])


def unseed(apps, schema_editor):
    apps.get_model("orders", "Embodiment").objects.filter(slug__in=list(STATE_LIMITS)).update(
        state_limits=[]
    )


class Migration(migrations.Migration):
    dependencies = [("orders", "0005_stream_catalog")]

    operations = [migrations.RunPython(seed, unseed)]
