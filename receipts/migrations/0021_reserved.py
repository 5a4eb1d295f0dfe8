"""Reserved for issue 20 §4 (page rollups): the owner fills in operations and replaces this docstring.

Reserved so parallel schema work never collides on a number; an empty migration is a no-op.
"""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("receipts", "0020_run_scenario_search")]
    operations = []
