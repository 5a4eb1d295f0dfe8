"""Query lookups the ingest's compiled statements share."""

from __future__ import annotations

from django.db.models import Lookup


class AnyOf(Lookup):
    """`field = ANY(array)`: an index lookup of each id, whatever the planner guesses of the table's size
    (`IN (SELECT unnest(…))` scanned every row of the side when its statistics were stale)."""

    lookup_name = "any_of"

    def as_sql(self, compiler, connection) -> tuple[str, list]:
        lhs, lhs_params = self.process_lhs(compiler, connection)
        rhs, rhs_params = self.process_rhs(compiler, connection)
        return f"{lhs} = ANY({rhs})", [*lhs_params, *rhs_params]
