# Placeholder laid by the lead so parallel work on models has its own migration; filled by its owner.
from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("receipts", "0013_notifications_and_alerts")]

    operations = []
