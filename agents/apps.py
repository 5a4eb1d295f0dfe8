from django.apps import AppConfig


class AgentsConfig(AppConfig):
    name = "agents"

    def ready(self) -> None:
        from agents.host import provider, registry
        from agents.host.hosting import HostingRuntime
        from agents.observe import writer
        from receipts.workers import runtime

        # A bad SIDEWISP_GRAPHS entry stops the process here, naming the entry.
        registry.graphs()
        # SIDEWISP_MODEL=provider:model whose integration package is missing stops it too, naming the package.
        provider.check_model_choice()
        runtime.register(HostingRuntime())
        # The agent package's writer (issue 31) writes to this database, or to a server in remote mode.
        writer.install()
