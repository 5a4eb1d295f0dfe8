from django.apps import AppConfig


class DemoConfig(AppConfig):
    """The demo team: its management command (run_scenario) and its Celery task (demo traffic)."""

    name = "agents.demo"
    label = "sidewisp_demo"
