# Reserved for the deployment id and applied intents (issue 19); filled by the change that needs it, or left empty with a line saying why.
from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("receipts", "0017_contract_steps")]

    operations = []
