"""Starting a hosted run of a registered graph: check, create the run, audit it and promise its start."""

from __future__ import annotations

from collections.abc import Mapping

from django.db import DataError, IntegrityError, transaction

from receipts.actions.policy import START_RUN, Outcome, Result, User, denial, log_attempt, may, noop
from receipts.actions.steps import promise, sent_or_queued
from receipts.ingest import runs, storable
from receipts.models import AuditEntry, OutboxIntent
from receipts.org import audit, teams
from receipts.verdicts import bundle
from receipts.workers import runtime

# The audit detail names at most this many of the input's top-level keys (names only, never values).
MAX_AUDITED_INPUT_KEYS = 50


def check_start(user: User | None) -> Result:
    """May `user` start runs? A denial is audited (there is no object yet: the id is "new")."""
    if may(user, START_RUN):
        return Result(Outcome.DONE, "")
    why = denial(user, START_RUN)
    audit.log(
        actor=user,
        action=START_RUN.name,
        object_type="run",
        object_id="new",
        outcome=AuditEntry.Outcome.DENIED,
        reason=why,
    )
    return Result(Outcome.DENIED, why)


def start_run(
    *, user: User, graph: str, graph_input: Mapping, key: str, operation_id: str = "", reason: str = ""
) -> Result:
    """Queue a hosted run of the registered `graph` and enqueue its start after commit.

    The audit entry names the graph and the input's top-level keys, never the
    input's values (they hold the user's prompt). A repeated key is a no-op that
    names the run it started; an operation id in use is refused.
    """
    found = check_start(user)
    if not found.ok:
        return found
    agent_runtime = runtime.current()
    # Without a given id, the key names the operation: a racing second submission of the same form
    # hits the unique operation id instead of starting a second run.
    operation_id = operation_id or f"op-{key[:16]}"
    with transaction.atomic():
        if (earlier := _started_with(key)) is not None:
            return noop(user, START_RUN, earlier.run, key, "This run was already started; nothing changed.")
        # Another team's graph is refused in the same words as an unknown one (issue 22 §2: no oracle).
        known = graph in agent_runtime.graphs() and teams.graphs_usable(user, [graph])
        refusal = "" if known else f"There is no registered graph named {graph!r}."
        if not refusal and (problem := storable.json_problem(graph_input)) is not None:
            refusal = f"The input cannot be stored: it {problem.what}."  # where is the input's text: not audited
        run = None
        if not refusal:
            try:
                with transaction.atomic():
                    run = runs.create_hosted(graph, dict(graph_input), operation_id=operation_id)
            except bundle.BundleError as exc:
                refusal = f"The operation id is not valid: it {exc.message}."
            except DataError as exc:
                # Whatever else the database refuses in the input: its class, never its message (which quotes it).
                refusal = f"The database refused the input ({type(exc).__name__}); nothing was started."
            except (ValueError, IntegrityError):
                if (earlier := _started_with(key)) is not None:
                    return noop(user, START_RUN, earlier.run, key, "This run was already started; nothing changed.")
                refusal = f"A run with operation id {operation_id!r} exists already; choose another or leave it empty."
        if run is None:
            audit.log(
                actor=user,
                action=START_RUN.name,
                object_type="run",
                object_id="new",
                outcome=AuditEntry.Outcome.REFUSED,
                reason=refusal,
                detail={"graph": graph[:100], "key": key},
            )
            return Result(Outcome.REFUSED, refusal)
        input_keys = sorted(str(name)[:100] for name in graph_input)[:MAX_AUDITED_INPUT_KEYS]
        detail = {"graph": graph, "input_keys": input_keys}
        entry = log_attempt(
            user, START_RUN.name, START_RUN, run, AuditEntry.Outcome.DONE, reason=reason, key=key, detail=detail
        )
        intent = promise(OutboxIntent.Kind.START, run.pk, run, entry)
    message = sent_or_queued(
        intent,
        f"Run {run.operation_id} is queued: a worker starts graph {graph}.",
        f"Run {run.operation_id} is queued: a worker starts graph {graph} as soon as one is reachable.",
    )
    return Result(Outcome.DONE, message, run)


def _started_with(key: str) -> AuditEntry | None:
    done = AuditEntry.objects.filter(action=START_RUN.name, outcome=AuditEntry.Outcome.DONE, detail__key=key)
    return done.select_related("run").order_by("pk").first()
