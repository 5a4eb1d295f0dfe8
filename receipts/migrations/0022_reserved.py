"""Reserved for issue 20 §2 (set-based ingest): the owner fills in operations and replaces this docstring.

Reserved so parallel schema work never collides on a number; an empty migration is a no-op.
"""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("receipts", "0021_reserved")]
    operations = []
