# Reserved for any other schema change of issues 18-19; filled by the change that needs it, or left empty with a line saying why.
from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("receipts", "0018_deployment_and_applied_intents")]

    operations = []
