"""The seeded rate card prices the plan's distinct objects (issue 30): one included, each
further distinct object at a flat fee, like environments. Every other seeded price stays."""

from decimal import Decimal

from django.db import migrations

SEEDED_VERSION = 1
INCLUDED_OBJECTS = 1
EXTRA_OBJECT_FEE = Decimal("50.00")


def seed(apps, schema_editor):
    apps.get_model("orders", "RateCard").objects.filter(version=SEEDED_VERSION).update(
        included_objects=INCLUDED_OBJECTS, extra_object_fee=EXTRA_OBJECT_FEE
    )


def unseed(apps, schema_editor):
    apps.get_model("orders", "RateCard").objects.filter(version=SEEDED_VERSION).update(
        included_objects=1, extra_object_fee=Decimal("0")
    )


class Migration(migrations.Migration):
    dependencies = [("orders", "0007_collection_plan")]

    operations = [migrations.RunPython(seed, unseed)]
