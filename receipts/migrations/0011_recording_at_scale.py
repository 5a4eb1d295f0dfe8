# Empty: reserved for the evidence writer (issue 13), which needed no schema change. Kept so the migration
# chain stays as databases migrated since then have it recorded.
from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("receipts", "0010_fill_run_health")]

    operations = []
