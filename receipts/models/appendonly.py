"""Append-only rows: a QuerySet and an abstract model that refuse updates and deletes, except retention's prune."""

from __future__ import annotations

import contextvars

from django.db import models


class AppendOnlyError(Exception):
    """Raised when code tries to change or delete an append-only row."""


# issue 22 §3: set only inside `receipts.retention.pruning()`, the one deliberate path that removes evidence.
_pruning: contextvars.ContextVar[bool] = contextvars.ContextVar("sidewisp_pruning", default=False)


class AppendOnlyQuerySet(models.QuerySet):
    def update(self, **kwargs):
        msg = f"{self.model.__name__} rows are append-only"
        raise AppendOnlyError(msg)

    def delete(self):
        msg = f"{self.model.__name__} rows are append-only"
        raise AppendOnlyError(msg)

    def prune(self) -> int:
        """Remove these rows in one plain DELETE (no signals, no cascade): retention only, never elsewhere."""
        self._check_pruning()
        return self._raw_delete(self.db)

    def detach(self, *, kept: dict | None = None, **nulls: None) -> int:
        """Clear the named foreign keys (retention keeps an entry whose run it prunes); nothing else changes but
        the `kept` columns, which record what a cleared key named (the pruned run's owner)."""
        self._check_pruning()
        if any(value is not None for value in nulls.values()):
            msg = "detach only clears foreign keys"
            raise AppendOnlyError(msg)
        return super().update(**nulls, **(kept or {}))

    def _check_pruning(self) -> None:
        if not _pruning.get():
            msg = f"{self.model.__name__} rows are append-only; only receipts.retention prunes them"
            raise AppendOnlyError(msg)


class AppendOnlyModel(models.Model):
    objects = AppendOnlyQuerySet.as_manager()

    class Meta:
        abstract = True

    def save(self, *args, **kwargs):
        if not self._state.adding:
            msg = f"{type(self).__name__} rows are append-only"
            raise AppendOnlyError(msg)
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        msg = f"{type(self).__name__} rows are append-only"
        raise AppendOnlyError(msg)
