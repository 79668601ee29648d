"""Offers obey the bid rules (issue 28): a re-collection job remembers who collected the
excluded seconds and at what agreed rate; fleets' currencies are ISO 4217 codes; and on
PostgreSQL the database itself refuses an offer or assignment that breaks the pay rule
(fleets/services/pay_terms.py): a currency other than the order's or the fleet's, or a rate
above the order's price per hour (and, for a re-collection, above the original agreed rate).

Rows written before this migration are not checked (the trigger sees new rows, and changed
rates or currencies, only): payables hold what the old rows owe against the customer money
(billing/services/payables.py). SQLite (the embedded demo) has the service's rule only."""

import django.db.models.deletion
from django.db import migrations, models

import fleets.currencies

# One definition of the rule, set-based: the rows to check come as parallel arrays, so a bulk
# insert of 2,000 offers is one join (a function called per row doubled the insert's time).
PAY_RULE_SQL = """
CREATE FUNCTION fleets_pay_refusal(
    p_jobs uuid[], p_fleets uuid[], p_rates numeric[], p_currencies text[]
) RETURNS text LANGUAGE sql STABLE AS $$
    SELECT refusal FROM (
        SELECT CASE
            WHEN n.currency IS DISTINCT FROM o.currency
                THEN format('currency %s is not the order''s %s', n.currency, o.currency)
            WHEN n.currency IS DISTINCT FROM f.currency
                THEN format('currency %s is not the fleet''s %s', n.currency, f.currency)
            -- LEAST ignores a NULL: no original rate, the order's price per hour alone
            WHEN n.rate < 0 OR n.rate > LEAST(trunc(o.total / o.hours, 4), j.original_rate_per_hour)
                THEN format('rate %s is above what job %s pays', n.rate, n.job_id)
        END AS refusal
        FROM unnest(p_jobs, p_fleets, p_rates, p_currencies) AS n(job_id, fleet_id, rate, currency)
        JOIN fleets_job j ON j.id = n.job_id
        JOIN orders_order o ON o.id = j.order_id
        JOIN fleets_fleet f ON f.id = n.fleet_id
    ) checked
    WHERE refusal IS NOT NULL
    LIMIT 1
$$;

CREATE FUNCTION fleets_pay_rule_rows() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE refusal text;
BEGIN
    SELECT fleets_pay_refusal(
        array_agg(job_id), array_agg(fleet_id), array_agg(rate_per_hour), array_agg(currency)
    ) INTO refusal FROM new_rows;
    IF refusal IS NOT NULL THEN
        RAISE EXCEPTION 'pay rule (fleets/services/pay_terms.py): %', refusal
            USING ERRCODE = 'check_violation', TABLE = TG_TABLE_NAME;
    END IF;
    RETURN NULL;
END $$;

CREATE FUNCTION fleets_pay_rule_row() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE refusal text;
BEGIN
    refusal := fleets_pay_refusal(
        ARRAY[NEW.job_id], ARRAY[NEW.fleet_id], ARRAY[NEW.rate_per_hour], ARRAY[NEW.currency]
    );
    IF refusal IS NOT NULL THEN
        RAISE EXCEPTION 'pay rule (fleets/services/pay_terms.py): %', refusal
            USING ERRCODE = 'check_violation', TABLE = TG_TABLE_NAME;
    END IF;
    RETURN NEW;
END $$;
"""
TABLE_TRIGGERS_SQL = """
CREATE TRIGGER {table}_pay_rule AFTER INSERT ON {table}
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT
    EXECUTE FUNCTION fleets_pay_rule_rows();
CREATE TRIGGER {table}_pay_rule_change BEFORE UPDATE ON {table} FOR EACH ROW
    WHEN (OLD.rate_per_hour IS DISTINCT FROM NEW.rate_per_hour
          OR OLD.currency IS DISTINCT FROM NEW.currency
          OR OLD.job_id IS DISTINCT FROM NEW.job_id
          OR OLD.fleet_id IS DISTINCT FROM NEW.fleet_id)
    EXECUTE FUNCTION fleets_pay_rule_row();
"""
TABLES = ("fleets_offer", "fleets_assignment")
DROP_SQL = """
DROP TRIGGER IF EXISTS {table}_pay_rule ON {table};
DROP TRIGGER IF EXISTS {table}_pay_rule_change ON {table};
"""
DROP_FUNCTIONS_SQL = """
DROP FUNCTION IF EXISTS fleets_pay_rule_row();
DROP FUNCTION IF EXISTS fleets_pay_rule_rows();
DROP FUNCTION IF EXISTS fleets_pay_refusal(uuid[], uuid[], numeric[], text[]);
"""


def create_pay_rule(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(PAY_RULE_SQL, params=None)
    for table in TABLES:
        schema_editor.execute(TABLE_TRIGGERS_SQL.format(table=table), params=None)


def drop_pay_rule(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for table in TABLES:
        schema_editor.execute(DROP_SQL.format(table=table))
    schema_editor.execute(DROP_FUNCTIONS_SQL)


class Migration(migrations.Migration):
    dependencies = [
        ("fleets", "0005_job_exact_target_seconds"),
        ("marketplace", "0003_organization_webhook_deliveries"),
        ("orders", "0006_seed_state_limits"),
    ]

    operations = [
        migrations.AddField(
            model_name="job",
            name="original_fleet",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="+",
                to="fleets.fleet",
            ),
        ),
        migrations.AddField(
            model_name="job",
            name="original_rate_per_hour",
            field=models.DecimalField(blank=True, decimal_places=4, max_digits=14, null=True),
        ),
        migrations.AddField(
            model_name="job",
            name="recollection_of",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="recollections",
                to="fleets.job",
            ),
        ),
        migrations.AlterField(
            model_name="fleet",
            name="currency",
            field=models.CharField(
                default="USD", max_length=3, validators=[fleets.currencies.validate_payout_currency]
            ),
        ),
        migrations.AddConstraint(
            model_name="fleet",
            constraint=models.CheckConstraint(
                condition=models.Q(("currency__regex", "^[A-Z]{3}$")), name="fleet_currency_code"
            ),
        ),
        migrations.AddConstraint(
            model_name="job",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    models.Q(
                        ("original_fleet__isnull", True), ("original_rate_per_hour__isnull", True)
                    ),
                    models.Q(("original_fleet__isnull", False), ("original_rate_per_hour__gte", 0)),
                    _connector="OR",
                ),
                name="job_original_terms_whole",
            ),
        ),
        migrations.RunPython(create_pay_rule, drop_pay_rule),
    ]
