from django.apps import AppConfig


class AgentsConfig(AppConfig):
    name = "agents"

    def ready(self) -> None:
        from agents import registry
        from agents.hosting import HostingRuntime
        from receipts import runtime

        # A bad SIDEWISP_GRAPHS entry stops the process here, naming the entry.
        registry.graphs()
        runtime.register(HostingRuntime())
