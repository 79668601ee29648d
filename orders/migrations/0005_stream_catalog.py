"""Fill the seeded catalog's stream spec (issue 15): each embodiment's state and action element
names (as many as its action_dim) and its standard scene camera; each sensor add-on's stream."""

from django.db import migrations

SCENE = [{"name": "scene", "min_width": 320, "min_height": 240}]


def _joints(prefix: str, count: int) -> list[str]:
    return [f"{prefix}{index}" for index in range(1, count + 1)]


ARM7 = _joints("joint_", 7)
UR = ["shoulder_pan", "shoulder_lift", "elbow", "wrist_1", "wrist_2", "wrist_3"]
SO100 = ["shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll"]
NAMES = {
    "franka-fr3": [*ARM7, "gripper_width"],
    "ur5e": [*UR, "gripper"],
    "so100": [*SO100, "gripper"],
    "aloha-bimanual": [
        *_joints("left_joint_", 6),
        "left_gripper",
        *_joints("right_joint_", 6),
        "right_gripper",
    ],
    "mobile-manipulator": ["base_x", "base_y", "base_yaw", *ARM7, "gripper"],
    "dexterous-hand": [*_joints("arm_joint_", 7), *_joints("hand_joint_", 16)],
}
STREAMS = {
    "wrist-camera": {"kind": "camera", "name": "wrist", "min_width": 320, "min_height": 240},
    "rgbd-camera": {"kind": "camera", "name": "rgbd", "min_width": 320, "min_height": 240},
    "force-torque": {
        "kind": "vector",
        "key": "observation.force_torque",
        "names": ["fx", "fy", "fz", "tx", "ty", "tz"],
    },
    "tactile": {
        "kind": "vector",
        "key": "observation.tactile",
        "names": [f"taxel_{index}" for index in range(16)],
    },
}


def fill(apps, schema_editor):
    Embodiment = apps.get_model("orders", "Embodiment")
    SensorAddon = apps.get_model("orders", "SensorAddon")
    for embodiment in Embodiment.objects.filter(slug__in=NAMES):
        names = NAMES[embodiment.slug]
        if len(names) != embodiment.action_dim:
            raise ValueError(f"{embodiment.slug}: {len(names)} names for {embodiment.action_dim}")
        embodiment.state_names = list(names)
        embodiment.action_names = list(names)
        embodiment.cameras = [dict(camera) for camera in SCENE]
        embodiment.save(update_fields=["state_names", "action_names", "cameras"])
    for sensor in SensorAddon.objects.filter(slug__in=STREAMS):
        sensor.stream = dict(STREAMS[sensor.slug])
        sensor.save(update_fields=["stream"])


def empty(apps, schema_editor):
    Embodiment = apps.get_model("orders", "Embodiment")
    SensorAddon = apps.get_model("orders", "SensorAddon")
    Embodiment.objects.filter(slug__in=NAMES).update(state_names=[], action_names=[], cameras=[])
    SensorAddon.objects.filter(slug__in=STREAMS).update(stream={})


class Migration(migrations.Migration):
    dependencies = [("orders", "0004_stream_spec")]

    operations = [migrations.RunPython(fill, empty)]
