from django.apps import AppConfig


class ReceiptsConfig(AppConfig):
    name = "receipts"
    verbose_name = "Handoff receipts"

    def ready(self) -> None:
        from receipts import timestamps
        from receipts.ingest.signals import handoffs_changed

        timestamps.connect()  # timestamptz values parsed by psycopg's compiled loader (a tenth of a render's CPU)

        # Trace export (issue 14 §3): a span per handoff verdict change, when SIDEWISP_OTLP_ENDPOINT is set.
        from receipts.notify.traces import export_handoff_changes

        handoffs_changed.connect(export_handoff_changes, dispatch_uid="sidewisp-trace-export")

        # issue 19 §1: a flush (between tests) must not give this database a new deployment id.
        from django.db.models.signals import post_migrate

        from receipts.workers.deployment import restore_after_flush

        post_migrate.connect(lambda **kwargs: restore_after_flush(), weak=False, dispatch_uid="deployment-flush")

        # Notifications and alerts (issue 14 §1): their handoff_changed receivers connect on import.
        # Teams (issue 22 §2): a change to a team or a membership renews the cached team switchers.
        from django.contrib.auth.signals import user_logged_in
        from django.db.models.signals import post_delete, post_save

        from receipts.models import Membership, Team
        from receipts.notify import alerts, notifications  # noqa: F401
        from receipts.org.teams import forget_switchable, warm_switchable

        # Filled at login, so the first page after it offers the switcher without a query of its own.
        user_logged_in.connect(warm_switchable, dispatch_uid="teams-switch-login")
        for model in (Team, Membership):
            post_save.connect(forget_switchable, sender=model, dispatch_uid=f"teams-switch-save-{model.__name__}")
            post_delete.connect(forget_switchable, sender=model, dispatch_uid=f"teams-switch-delete-{model.__name__}")
