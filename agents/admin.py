"""The module Django's admin autodiscovery loads for this app: the limits' admin lives in agents.limits.admin."""

from agents.limits import admin  # noqa: F401 - registers LimitsVersionAdmin
