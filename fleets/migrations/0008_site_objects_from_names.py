"""Issue 30: every site's `objects_available` names become registered objects (SiteObject
rows: active, no details), as site registration keeps them in sync from now on. Names that
cannot be an object's (empty, over 100 characters, control characters) are left out; rows
already there are kept. Reversing leaves the rows (they are the fleets' data now)."""

import re

from django.db import migrations

NAME_MAX = 100
CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def objects_from_names(apps, schema_editor):
    Site = apps.get_model("fleets", "Site")
    SiteObject = apps.get_model("fleets", "SiteObject")
    rows = []
    sites = Site.objects.exclude(objects_available=[]).only("id", "fleet_id", "objects_available")
    for site in sites.iterator(chunk_size=1000):
        names = site.objects_available if isinstance(site.objects_available, list) else []
        cleaned = dict.fromkeys(name.strip() for name in names if isinstance(name, str))
        rows += [
            SiteObject(fleet_id=site.fleet_id, site_id=site.id, name=name)
            for name in cleaned
            if 1 <= len(name) <= NAME_MAX and not CONTROL.search(name)
        ]
    SiteObject.objects.bulk_create(rows, batch_size=1000, ignore_conflicts=True)


class Migration(migrations.Migration):
    dependencies = [("fleets", "0007_collection_plan")]

    operations = [migrations.RunPython(objects_from_names, migrations.RunPython.noop)]
