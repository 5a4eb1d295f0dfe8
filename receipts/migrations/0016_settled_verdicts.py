# Reserved for settled verdicts (issue 18, spec v1.2 Settled); filled by the change that needs it, or left empty with a line saying why.
from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("receipts", "0015_report_kinds_for_team_shapes")]

    operations = []
