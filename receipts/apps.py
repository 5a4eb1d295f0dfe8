from django.apps import AppConfig


class ReceiptsConfig(AppConfig):
    name = "receipts"
    verbose_name = "Handoff receipts"

    def ready(self) -> None:
        from receipts.signals import handoff_changed

        # Trace export (issue 14 §3): a span per handoff verdict change, when SIDEWISP_OTLP_ENDPOINT is set.
        from receipts.traces import export_handoff_change

        handoff_changed.connect(export_handoff_change, dispatch_uid="sidewisp-trace-export")

        # Notifications and alerts (issue 14 §1): their handoff_changed receivers connect on import.
        from receipts import alerts, notifications  # noqa: F401
