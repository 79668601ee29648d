"""The pay a fleet gets is fixed when it is offered the job (Offer.rate_per_hour) and when it
takes it (Assignment.rate_per_hour: the offer's rate or the winning bid's price). Rows from
before this migration get what payables used then: the bid's price, else the fleet's rate."""

from decimal import Decimal

from django.db import migrations, models


def fill_rates(apps, schema_editor):
    Offer = apps.get_model("fleets", "Offer")
    Assignment = apps.get_model("fleets", "Assignment")
    for offer in Offer.objects.select_related("fleet").iterator():
        offer.rate_per_hour = offer.fleet.payout_rate_per_hour
        offer.currency = offer.fleet.currency
        offer.save(update_fields=["rate_per_hour", "currency"])
    for assignment in Assignment.objects.select_related("fleet", "bid", "offer").iterator():
        if assignment.bid_id is not None:
            rate = assignment.bid.price_per_hour
        elif assignment.offer_id is not None:
            rate = assignment.offer.rate_per_hour
        else:
            rate = assignment.fleet.payout_rate_per_hour
        assignment.rate_per_hour = rate if rate is not None else Decimal("0")
        assignment.currency = assignment.fleet.currency
        assignment.save(update_fields=["rate_per_hour", "currency"])


class Migration(migrations.Migration):
    dependencies = [("fleets", "0002_accepted_seconds")]

    operations = [
        migrations.AddField(
            model_name="offer",
            name="rate_per_hour",
            field=models.DecimalField(decimal_places=4, max_digits=14, null=True),
        ),
        migrations.AddField(
            model_name="offer", name="currency", field=models.CharField(max_length=3, null=True)
        ),
        migrations.AddField(
            model_name="assignment",
            name="rate_per_hour",
            field=models.DecimalField(decimal_places=4, max_digits=14, null=True),
        ),
        migrations.AddField(
            model_name="assignment",
            name="currency",
            field=models.CharField(max_length=3, null=True),
        ),
        migrations.RunPython(fill_rates, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="offer",
            name="rate_per_hour",
            field=models.DecimalField(decimal_places=4, max_digits=14),
        ),
        migrations.AlterField(
            model_name="offer", name="currency", field=models.CharField(max_length=3)
        ),
        migrations.AlterField(
            model_name="assignment",
            name="rate_per_hour",
            field=models.DecimalField(decimal_places=4, max_digits=14),
        ),
        migrations.AlterField(
            model_name="assignment", name="currency", field=models.CharField(max_length=3)
        ),
        migrations.AddConstraint(
            model_name="assignment",
            constraint=models.CheckConstraint(
                condition=models.Q(rate_per_hour__gte=0), name="assignment_rate_nonneg"
            ),
        ),
    ]
