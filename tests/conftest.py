"""Shared fixtures. Integration tests use the real Redis at REDIS_URL and the real database."""

from __future__ import annotations
