"""Every migration can be unapplied: each app goes to zero and back up to the latest, on
PostgreSQL, and the schema it rebuilds is the one it dropped."""

import pytest
from django.apps import apps
from django.core.management import call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.db.migrations.loader import MigrationLoader

# Later apps first: each one's migrations depend on the ones after it in this list.
PROJECT_APPS_REVERSE_DEPENDENCY_ORDER = ["billing", "datasets", "fleets", "orders", "marketplace"]

# Operations that cannot be unapplied, as (app, migration, operation index), each with the
# reason it must stay so. None today: the catalog seed (orders 0002) deletes what it seeded.
EXPECTED_IRREVERSIBLE: dict[tuple[str, str, int], str] = {}


def _schema() -> dict[str, set]:
    """What PostgreSQL holds in the public schema: columns, constraints and indexes."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT table_name, column_name, data_type, is_nullable, character_maximum_length,"
            " numeric_precision, numeric_scale FROM information_schema.columns"
            " WHERE table_schema = 'public'"
        )
        columns = set(cursor.fetchall())
        cursor.execute(
            "SELECT conrelid::regclass::text, conname, contype, pg_get_constraintdef(oid)"
            " FROM pg_constraint WHERE connamespace = 'public'::regnamespace"
        )
        constraints = set(cursor.fetchall())
        cursor.execute(
            "SELECT tablename, indexname, indexdef FROM pg_indexes WHERE schemaname = 'public'"
        )
        indexes = set(cursor.fetchall())
    return {"columns": columns, "constraints": constraints, "indexes": indexes}


def _tables_of(app_label: str) -> set[str]:
    return {model._meta.db_table for model in apps.get_app_config(app_label).get_models()}


def _applied_project_migrations() -> set[tuple[str, str]]:
    applied = MigrationExecutor(connection).loader.applied_migrations
    return {key for key in applied if key[0] in PROJECT_APPS_REVERSE_DEPENDENCY_ORDER}


def test_the_irreversible_migrations_are_exactly_the_documented_ones():
    loader = MigrationLoader(None, ignore_no_migrations=True)
    irreversible = {
        (app_label, name, index)
        for (app_label, name), migration in loader.disk_migrations.items()
        for index, operation in enumerate(migration.operations)
        if not operation.reversible
    }
    assert irreversible == set(EXPECTED_IRREVERSIBLE)


@pytest.mark.django_db(transaction=True)
def test_every_app_migrates_to_zero_and_back_to_the_same_schema():
    # given: the fully migrated test database, seeded catalog included
    from orders.models import Embodiment, RateCard

    latest = _applied_project_migrations()
    schema_before = _schema()
    seeded_embodiments = set(Embodiment.objects.values_list("slug", flat=True))
    assert RateCard.objects.filter(version=1).exists() and seeded_embodiments
    existing_tables = set(connection.introspection.table_names())

    # when: each app goes to zero, later apps first
    for app_label in PROJECT_APPS_REVERSE_DEPENDENCY_ORDER:
        call_command("migrate", app_label, "zero", verbosity=0, interactive=False)
        # then: its tables are gone and none of its migrations is recorded as applied
        assert not _tables_of(app_label) & set(connection.introspection.table_names())
        assert not {key for key in _applied_project_migrations() if key[0] == app_label}
    assert _tables_of("orders") & existing_tables  # the tables were there to begin with

    # when: everything migrates forward again
    call_command("migrate", verbosity=0, interactive=False)

    # then: the same migrations, the same columns, constraints and indexes, the same seed
    assert _applied_project_migrations() == latest
    schema_after = _schema()
    for part in ("columns", "constraints", "indexes"):
        assert schema_after[part] == schema_before[part], part
    assert set(Embodiment.objects.values_list("slug", flat=True)) == seeded_embodiments
    assert RateCard.objects.filter(version=1).count() == 1
