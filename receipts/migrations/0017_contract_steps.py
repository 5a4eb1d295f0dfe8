# Reserved for the contracts' steps entry (issue 18, spec v1.2 Steps of one agent); filled by the change that needs it, or left empty with a line saying why.
from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("receipts", "0016_settled_verdicts")]

    operations = []
