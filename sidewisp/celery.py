import logging
import os

from celery import Celery
from celery.signals import before_task_publish

from sidewisp.ops import envelope

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "sidewisp.settings")
# Every task message names its deployment, and a worker runs only its own deployment's (sidewisp.ops.envelope).
app = Celery("sidewisp", task_cls="sidewisp.ops.envelope:DeploymentTask")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
before_task_publish.connect(envelope.stamp, weak=False, dispatch_uid="sidewisp-deployment-stamp")
logging.getLogger("celery.app.trace").addFilter(envelope.QuietRefusals())
