from django.apps import AppConfig


class AgentsConfig(AppConfig):
    name = "agents"

    def ready(self) -> None:
        from agents.host import registry
        from agents.host.hosting import HostingRuntime
        from receipts.workers import runtime

        # A bad SIDEWISP_GRAPHS entry stops the process here, naming the entry.
        registry.graphs()
        runtime.register(HostingRuntime())
