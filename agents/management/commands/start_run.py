"""Start a hosted run of a registered graph: `manage.py start_run GRAPH --input JSON [--operation-id ID]`."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from agents.host import hosting, registry
from receipts.ingest import jsonfiles


class Command(BaseCommand):
    help = "Queue a run of a registered graph (SIDEWISP_GRAPHS) for a worker and print its operation id."

    def add_arguments(self, parser):
        parser.add_argument("graph", help="the registered graph's name")
        parser.add_argument("--input", default="{}", help='the graph input as JSON, e.g. {"messages": [...]}')
        parser.add_argument("--operation-id", default=None, help="a stable id of your own (default: a fresh one)")

    def handle(self, *args, graph: str, input: str, operation_id: str | None = None, **options):
        try:
            graph_input = jsonfiles.loads(input, "--input")
        except CommandError as exc:
            return self._fail(str(exc))
        if not isinstance(graph_input, dict):
            return self._fail("--input must be a JSON object (the graph's input state)")
        if graph not in registry.graphs():
            known = ", ".join(sorted(registry.graphs())) or "none"
            return self._fail(f"unknown graph {graph!r}; registered: {known}")
        try:
            run = hosting.start(graph, graph_input, operation_id=operation_id)
        except ValueError as exc:
            return self._fail(str(exc))
        self.stdout.write(run.operation_id)

    def _fail(self, message: str) -> None:
        self.stderr.write(f"start_run: {message}")
        raise SystemExit(2)
