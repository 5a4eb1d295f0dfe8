"""PostgreSQL timestamps read by psycopg's compiled parser instead of its pure-Python one.

Django's psycopg backend reads every `timestamptz` with a loader of its own that subclasses psycopg's
pure-Python loader (to set the zone Django expects), about 3 µs a value. A live render reads thousands of
them (the run page's handoffs, their runs, receipts and history: a tenth of its CPU on the bench's data).
The loader registered here on each new connection gives the same values, parsed by psycopg's compiled loader
(a few tenths of a µs) and set to Django's zone exactly as Django's does. Nothing else changes: other
databases, other types and a psycopg without its compiled part keep Django's loader.
"""

from __future__ import annotations

from django.db.backends.signals import connection_created


def connect() -> None:
    """Register the faster loader on every PostgreSQL connection opened from now on (an app's `ready`)."""
    connection_created.connect(_use_compiled_loader, weak=False, dispatch_uid="receipts-timestamptz-loader")


def _use_compiled_loader(sender, connection, **kwargs) -> None:
    if connection.vendor != "postgresql":
        return
    loader = _loader_for(connection.timezone)
    if loader is not None:
        connection.connection.adapters.register_loader("timestamptz", loader)


def _loader_for(zone):
    """A loader like Django's for `zone` (its `timezone` is what Django checks before each cursor) whose parsing
    is psycopg's compiled one; None when psycopg has no compiled loader."""
    from django.db.backends.postgresql.psycopg_any import BaseTzLoader
    from psycopg import adapters, postgres
    from psycopg.pq import Format

    compiled = adapters.get_loader(postgres.types["timestamptz"].oid, Format.TEXT)
    if compiled is None or not compiled.__module__.startswith(("psycopg_binary", "psycopg_c")):
        return None

    class CompiledTzLoader(BaseTzLoader):
        timezone = zone

        def __init__(self, oid: int, context=None) -> None:
            super().__init__(oid, context)
            self._parse = compiled(oid, context).load

        def load(self, data):
            return self._parse(data).replace(tzinfo=self.timezone)

    return CompiledTzLoader
