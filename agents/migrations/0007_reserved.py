# Reserved for the hosted-mode and limits changes of issue 18 (no demo name in runtime defaults); filled by
# the change that needs it, or left empty with a line saying why.
from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("agents", "0006_checkpoint_tables")]

    operations = []
