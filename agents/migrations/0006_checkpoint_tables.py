"""The LangGraph checkpointer's tables, created once here instead of by every task.

Creating them from tasks deadlocked on a fresh PostgreSQL database when many
runs started at once. LangGraph's `setup()` keeps its own migration table, so
running it again (a later LangGraph adds a migration) is safe: add a migration
that calls it again.
"""

from django.db import migrations


def set_up_checkpoint_tables(apps, schema_editor):
    from agents.host.checkpoints import set_up_tables

    set_up_tables()


class Migration(migrations.Migration):
    dependencies = [("agents", "0005_routes_3_coder")]

    operations = [migrations.RunPython(set_up_checkpoint_tables, migrations.RunPython.noop, elidable=False)]
