"""Logging filters: a refused request is one line, not a stack trace."""

from __future__ import annotations

import logging

from django.core.exceptions import PermissionDenied


class NoTracebackForPermissionDenied(logging.Filter):
    """Drop the traceback Django attaches to "Forbidden (Permission denied)": a 403 is an answer, not a bug."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and isinstance(record.exc_info[1], PermissionDenied):
            record.exc_info = None
            record.exc_text = None
        return True
