from django.apps import AppConfig


class SidewispConfig(AppConfig):
    name = "sidewisp"
    verbose_name = "Sidewisp operator pages"

    def ready(self) -> None:
        from axes.signals import user_locked_out

        from sidewisp.lockout import audit_lockout

        user_locked_out.connect(audit_lockout, dispatch_uid="sidewisp-audit-lockout")

        # Metrics: health events that could not be published are counted (sidewisp.metrics).
        from sidewisp.metrics import count_publish_failures

        count_publish_failures()
