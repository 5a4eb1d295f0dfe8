"""A remote app's pending call (issue 30 §3): the tool a wait gates and its argument key NAMES, never values.

A local app hands its run's pending call over in its `RunEntry`; a remote app (which keeps no run row) posts it
as a `pending` entry after the wait's receipts, and the server stores it as the run's `Run.pending_call`, what
the inbox, the confirm page and the decision offered back to the app (`sidewisp.api`) read. Only names are
kept: the tool names, the argument names with their type names, the decisions the interrupt allows, the resume
token and the interrupts' ids with their call counts. Anything else in the object is dropped, never stored.
"""

from __future__ import annotations

from collections.abc import Mapping

from receipts.ingest import runs
from receipts.ingest.sides import RunNotOwned, namespace, owner_problem
from receipts.models import Run
from receipts.verdicts.bundle import MAX_LIST_ENTRIES, BundleError, identifier_problem, parse_required_identifier

DECISIONS = ("approve", "edit", "reject")
# The type names an argument may be said to have (anything else is stored as "object").
TYPE_NAMES = frozenset({"str", "int", "float", "bool", "list", "dict", "tuple", "NoneType", "object"})
MAX_CALLS = 100


def parse(value: object, field: str = "pending_call") -> dict:
    """The pending call as stored, names only; BundleError naming the field when it is not one."""
    if not isinstance(value, Mapping):
        raise BundleError(field, "must be an object")
    tools = value.get("tool")
    if not isinstance(tools, str) or not tools.strip():
        raise BundleError(f"{field}.tool", "must be the gated tool's name")
    names = [parse_required_identifier(name.strip(), f"{field}.tool") for name in tools.split(",")]
    arg_types = value.get("arg_types", {})
    if not isinstance(arg_types, Mapping) or len(arg_types) > MAX_LIST_ENTRIES:
        raise BundleError(f"{field}.arg_types", f"must map at most {MAX_LIST_ENTRIES} argument names to type names")
    kept: dict[str, str] = {}
    for key, type_name in arg_types.items():
        if not isinstance(key, str) or not key or identifier_problem(key):
            raise BundleError(f"{field}.arg_types", "holds an argument name that is not a name")
        kept[key] = type_name if isinstance(type_name, str) and type_name in TYPE_NAMES else "object"
    allowed = value.get("allowed_decisions", list(DECISIONS))
    if not isinstance(allowed, list) or any(d not in DECISIONS for d in allowed):
        raise BundleError(f"{field}.allowed_decisions", f"must list some of {', '.join(DECISIONS)}")
    token = parse_required_identifier(value.get("resume_token_id"), f"{field}.resume_token_id")
    interrupts = value.get("interrupts", [])
    if not isinstance(interrupts, list) or len(interrupts) > MAX_LIST_ENTRIES:
        raise BundleError(f"{field}.interrupts", f"must be a list of at most {MAX_LIST_ENTRIES} interrupts")
    entries = []
    for index, item in enumerate(interrupts):
        where = f"{field}.interrupts[{index}]"
        if not isinstance(item, Mapping):
            raise BundleError(where, "must be an object")
        calls = item.get("calls")
        if type(calls) is not int or not 0 <= calls <= MAX_CALLS:
            raise BundleError(f"{where}.calls", f"must be a whole number from 0 to {MAX_CALLS}")
        entries.append({"id": parse_required_identifier(item.get("id"), f"{where}.id"), "calls": calls})
    return {
        "tool": ", ".join(names),
        "arg_types": kept,
        "arg_schema": {},  # a remote app's declared ranges are not taken: an edit is checked by the app's graph
        "allowed_decisions": [d for d in DECISIONS if d in allowed],
        "resume_token_id": token,
        "interrupts": entries,
    }


def store(operation_id: str, pending_call: Mapping) -> bool:
    """Keep the run's pending call; True when it changed (False: no such run of this side, or the same call)."""
    run = Run.objects.for_operation(operation_id, namespace()).first()
    if run is None:
        return False
    if problem := owner_problem(run):
        raise RunNotOwned("operation_id", problem)
    if run.pending_call == dict(pending_call):
        return False
    run.pending_call = dict(pending_call)
    run.save(update_fields=["pending_call", "updated_at"])
    runs.announce(run)  # the inbox's rows show the tool: live pages render again
    return True
