# Issue 14 §4: per-source API tokens (receipts.sources) and the source that created a run.
import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("receipts", "0013_notifications_and_alerts")]

    operations = [
        migrations.AddField(
            model_name="run",
            name="source_name",
            field=models.CharField(blank=True, db_index=True, editable=False, max_length=100, null=True),
        ),
        migrations.CreateModel(
            name="SourceToken",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("source_name", models.CharField(db_index=True, max_length=100)),
                ("note", models.CharField(blank=True, max_length=200)),
                ("key_id", models.CharField(editable=False, max_length=16, unique=True)),
                ("digest", models.CharField(editable=False, max_length=64)),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now, editable=False)),
                ("last_used_at", models.DateTimeField(blank=True, editable=False, null=True)),
                ("revoked_at", models.DateTimeField(blank=True, editable=False, null=True)),
                (
                    "created_by",
                    models.ForeignKey(
                        blank=True,
                        editable=False,
                        null=True,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
                (
                    "revoked_by",
                    models.ForeignKey(
                        blank=True,
                        editable=False,
                        null=True,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={"ordering": ["source_name", "-created_at"]},
        ),
    ]
