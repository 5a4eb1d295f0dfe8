"""Sidewisp's agent package: what runs inside a LangGraph app to record what its team did (issue 31).

No Django in it: the receipt shapes (`bundle`, `fields`, `contracts`) and the writer's entries (`entries`) are
plain Python, shared with the Sidewisp server, which imports them from here.
"""

from __future__ import annotations

__version__ = "0.1.0"
