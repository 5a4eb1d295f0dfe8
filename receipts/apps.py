from django.apps import AppConfig


class ReceiptsConfig(AppConfig):
    name = "receipts"
    verbose_name = "Handoff receipts"

    def ready(self) -> None:
        from receipts.signals import handoffs_changed

        # Trace export (issue 14 §3): a span per handoff verdict change, when SIDEWISP_OTLP_ENDPOINT is set.
        from receipts.traces import export_handoff_changes

        handoffs_changed.connect(export_handoff_changes, dispatch_uid="sidewisp-trace-export")

        # issue 19 §1: a flush (between tests) must not give this database a new deployment id.
        from django.db.models.signals import post_migrate

        from receipts.deployment import restore_after_flush

        post_migrate.connect(lambda **kwargs: restore_after_flush(), weak=False, dispatch_uid="deployment-flush")

        # Notifications and alerts (issue 14 §1): their handoff_changed receivers connect on import.
        from receipts import alerts, notifications  # noqa: F401
