from django.apps import AppConfig


class ReceiptsConfig(AppConfig):
    name = "receipts"
    verbose_name = "Handoff receipts"

    def ready(self) -> None:
        # Notifications and alerts (issue 14 §1): their handoff_changed receivers connect on import.
        from receipts import alerts, notifications  # noqa: F401
