"""Issue 22 §1 (single sign-on): SsoIdentity, the identity provider's (issuer, subject) behind a user.

A user with one is managed by the identity provider; a user without one is a local account.
"""

import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("receipts", "0025_reserved"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="SsoIdentity",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("issuer", models.CharField(max_length=500)),
                (
                    "subject",
                    models.CharField(help_text="The identity provider's `sub` claim: stable, never reused.", max_length=255),
                ),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                (
                    "user",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="sso_identity",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={
                "verbose_name": "single sign-on identity",
                "verbose_name_plural": "single sign-on identities",
                "constraints": [models.UniqueConstraint(fields=("issuer", "subject"), name="sso_identity_once")],
            },
        ),
    ]
