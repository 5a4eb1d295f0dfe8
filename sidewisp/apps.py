from django.apps import AppConfig


class SidewispConfig(AppConfig):
    name = "sidewisp"
    verbose_name = "Sidewisp operator pages"

    def ready(self) -> None:
        from axes.signals import user_locked_out

        from sidewisp.ops import checks  # noqa: F401  (registers the configuration checks)
        from sidewisp.web.lockout import audit_lockout

        user_locked_out.connect(audit_lockout, dispatch_uid="sidewisp-audit-lockout")

        from sidewisp.live import revocations

        revocations.connect()  # logging out or deactivating a user closes their live sockets at once

        # Metrics: health events that could not be published, and the evidence writers' counters of each
        # worker process, are counted in Redis (sidewisp.ops.metrics, sidewisp.ops.writers).
        from celery.signals import task_postrun

        from sidewisp.ops.metrics import count_publish_failures
        from sidewisp.ops.writers import push_writer_counts

        count_publish_failures()
        task_postrun.connect(push_writer_counts, weak=False, dispatch_uid="sidewisp-writer-counts")
