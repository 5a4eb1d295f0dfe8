"""What each run offers one user, decided here once for every page, and each handoff's action links.

A page never offers a link the action could only refuse or deny.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from django.urls import reverse

from receipts import actions
from receipts.actions import User
from receipts.models import Handoff, Run
from receipts.workers.runtime import current as current_runtime
from sidewisp.pages import labels
from sidewisp.pages.decisions import decisions_on_open_waits


@dataclass(frozen=True)
class Offers:
    """Which actions the pages offer one user for one run, and in words why the others are not offered.

    A page never offers a link the action could only refuse or deny: the user's role (receipts.actions.may,
    which audits nothing), the runtime (what can reach the run's graph) and the run's state decide. A note
    says why an action is not offered only to a user whose role would allow it.
    """

    resumer: str  # who resumes the run after a decision, as a sentence
    observed: bool
    decide: bool  # a decision can reach the graph (the owner rule is per wait: handoff_links)
    reverify: bool  # verify a false completion again (its verifier only)
    reverify_note: str
    controllable: bool  # auto-continue can be stopped and lifted (state rules aside)
    stop: bool
    resume: bool
    retry: bool  # retry from the checkpoint (parked, or the destination did not start)
    drive_note: str
    retry_note: str = ""  # why a retry cannot work (the confirmation page says it)
    retry_hint: str = ""  # the same, on the run page: only where a retry is the move and the user may do it
    finished: bool = False
    may: frozenset[str] = frozenset()  # the policy names this user's role permits here (owner rule aside)
    reopen: bool = False  # give a false completion back to its agent (spec §5 v1.3)
    reopen_note: str = ""
    reopener: str = ""  # who gives a reopened task back to its agent, as a sentence

    def allows(self, what: str) -> bool:
        """Whether the action `what` (a confirmation page's name) can work on this run at all."""
        if what in actions.DECISION_KINDS:
            return self.decide
        if what == "reopen":
            return self.reopen
        if what == "verify":
            return self.reverify
        if what in ("stop", "resume"):
            return self.controllable and not self.finished
        if what == "retry":
            return not self.retry_note
        return True

    def why_not(self, what: str) -> str:
        if what in actions.DECISION_KINDS:
            return f"A decision cannot reach this run's graph. {self.resumer}"
        if what == "retry":
            return self.retry_note
        if what in ("stop", "resume") and self.finished:
            return "This run has ended: there is nothing to stop or continue."
        if what == "reopen":
            return self.reopen_note
        return self.reverify_note if what == "verify" else self.drive_note


def allowed(user: User) -> frozenset[str]:
    """The names of the policies without an owner rule that `user` may use: their permissions, asked once for a
    list rather than for each of its runs."""
    return frozenset(policy.name for policy in actions.POLICIES if not policy.owner_rule and actions.may(user, policy))


def run_offers(
    run: Run,
    user: User,
    *,
    stoppable: bool = False,
    verdicts: set[str] | None = None,
    may: frozenset[str] | None = None,
) -> Offers:
    """What `user` is offered on `run`; `verdicts` are its handoffs' verdicts when the caller has them, `may` what
    `allowed(user)` gives when the caller asked it already."""
    runtime = current_runtime()
    # An imported run is neither: no process drives it.
    observed = run.mode == Run.Mode.OBSERVED and run.source == Run.Source.AGENT
    drivable = runtime.can_drive(run)
    finished = run.status in actions.FINISHED
    may = allowed(user) if may is None else may
    controls = actions.STOP_RUN.name in may  # stop, resume and retry: the run-control permission
    # Stopping works in both modes: a worker (hosted) and the app's observe (observed) both check
    # auto-continue before every step and park the run. Resuming differs: for a hosted run a worker
    # drives it on; for an observed run it only lifts the stop (observe parks at once while it is
    # off), so it is still offered, worded as such, and the app continues when it calls observe again.
    if finished:
        drive_note = ""  # an ended run: nothing to stop or drive, and nothing to explain
    elif observed:
        drive_note = (
            "This run is driven by the app's own process. Stopping auto-continue works: the app's observe "
            "checks it before every step and parks the run. Sidewisp cannot continue the run itself: once the "
            "stop is lifted, the app continues it when it calls observe again."
        )
    elif not drivable:
        drive_note = "No Sidewisp worker can drive this run here: Sidewisp cannot stop or continue it."
    else:
        drive_note = ""
    reverify = runtime.can_reverify(run)
    if reverify:
        reverify_note = ""
    elif observed:
        reverify_note = "Its outcome verifier runs in the app's process; Sidewisp cannot run it again."
    else:
        reverify_note = "No outcome verifier is registered for this run here; Sidewisp cannot run it again."
    reopen = runtime.can_reopen(run)
    reopen_note = "" if reopen else f"Nothing can give this task back to its agent here: {runtime.reopener(run)}"
    controllable = (drivable or observed) and not finished
    retry_candidate = _retry_candidate(run, verdicts)
    retry_note = actions.retry_refusal(run) if retry_candidate else _NOT_RETRIED
    return Offers(
        resumer=runtime.resumer(run),
        observed=observed,
        decide=runtime.can_resume(run),
        reverify=reverify,
        reverify_note=reverify_note if actions.VERIFY_TASK.name in may else "",
        reopen=reopen,
        reopen_note=reopen_note if actions.REOPEN_TASK.name in may else "",
        reopener=runtime.reopener(run),
        controllable=controllable,
        stop=controls and run.auto_continue and stoppable and controllable,
        resume=controls and not run.auto_continue and controllable,
        retry=controls and not retry_note,
        drive_note=drive_note if controls else "",
        retry_note=retry_note,
        retry_hint=retry_note if controls and retry_candidate else "",
        finished=finished,
        may=may,
    )


_NOT_RETRIED = "Only a parked run, or one whose destination did not start, is retried from its checkpoint."


def _retry_candidate(run: Run, verdicts: set[str] | None) -> bool:
    # Where retrying is the move: a parked run, or one whose destination did not start (any state: the
    # hint then says why it cannot work, e.g. the run has ended). Elsewhere nothing is offered or said.
    if run.status == Run.Status.PARKED:
        return True
    if verdicts is None:
        return run.handoffs.filter(verdict="DESTINATION_NOT_STARTED").exists()
    return "DESTINATION_NOT_STARTED" in verdicts


def with_offers(handoffs: list[Handoff], user: User) -> list[Handoff]:
    """`handoffs` (their runs loaded), each with its run's offers and its own links (asked once per run)."""
    by_run: dict[int, Offers] = {}
    settled = actions.settlements([h for h in handoffs if h.verdict == "FALSE_COMPLETE"])
    decided = decisions_on_open_waits(handoffs)
    may = allowed(user) if handoffs else frozenset()
    for handoff in handoffs:
        if handoff.run_id not in by_run:
            by_run[handoff.run_id] = run_offers(handoff.run, user, verdicts=set(), may=may)
        handoff.decided = decided.get(handoff.pk)
        offer_on_handoff(handoff, by_run[handoff.run_id], user, settled.get(handoff.pk))
    return handoffs


@dataclass(frozen=True)
class Link:
    what: str  # the confirmation page's name
    label: str
    url: str


@dataclass(frozen=True)
class Note:
    what: str
    text: str


def offer_on_handoff(h: Handoff, offers: Offers, user: User, settlement: actions.Settlement | None) -> None:
    """Set `h.offers`, `h.links` (what this user may do to it now), `h.notes` and `h.settlement`."""
    h.offers, h.settlement = offers, settlement
    if "decided" not in h.__dict__:  # with_offers asks for a whole list at once
        h.decided = decisions_on_open_waits([h]).get(h.pk)
    h.links, h.notes = handoff_links(h, offers, user, settled=settlement is not None)
    h.who_can = who_can(h, user) if h.wait_open and not h.links and not h.notes and not h.decided else ""


def who_can(h: Handoff, user: User) -> str:
    """Why `user` cannot act on this open wait, and who can (issue 30 §3: a wait never has neither buttons nor
    words). Only for a wait the pages offer this user no action on and say nothing else about."""
    if h.verdict == "WAITING_ON_APPROVAL":
        if actions.may(user, actions.DECIDE_WAIT, h):
            return ""  # offered (or a note already says why not)
        why = "You are not its owner. " if user.has_perm(actions.DECIDE_OWN) else "Your role does not decide waits. "
        return why + actions.denial(user, actions.DECIDE_WAIT, h)
    who = h.wait_owner or "nobody yet"
    verdict = labels.VERDICTS.get(h.verdict, labels.UNKNOWN)[1]
    return (
        f"Approve and reject are not offered: this wait is not valid ({verdict}"
        f"{', ' + h.reason if h.reason else ''}), and your role does not reassign or cancel waits. "
        + actions.needs("Assigning it an owner and a deadline, or cancelling it,", (actions.REASSIGN,))
        + f" Its owner: {who}."
    )


def handoff_links(h: Handoff, offers: Offers, user: User, *, settled: bool = False) -> tuple[list[Link], list[Note]]:
    """The action links one handoff offers `user`, and notes for what their role allows but cannot work."""
    links: list[Link] = []
    notes: list[Note] = []

    def link(what: str, label: str) -> None:
        links.append(Link(what, label, reverse("sidewisp:confirm", args=[what, h.pk])))

    reassigns = actions.REASSIGN_WAIT.name in offers.may
    if h.wait_open and getattr(h, "decided", None) is not None:
        pass  # decided: nothing is decided, reassigned or cancelled again (its run is getting the decision)
    elif h.wait_open and h.verdict == "WAITING_ON_APPROVAL":
        if actions.may(user, actions.DECIDE_WAIT, h):
            if offers.decide:
                link("approve", "Approve…")
                link("reject", "Reject…")
                link("edit", "Edit…")
            else:
                text = (
                    "Approve, reject and edit are not offered: a decision cannot reach this run's graph. "
                    f"{offers.resumer} What unblocks it: an operator cancels the wait, or the run is started "
                    "again where a worker or its app can resume it."
                )
                notes.append(Note("decide", text))
        if reassigns:
            link("reassign", "Reassign…")
    elif h.wait_open:
        if reassigns:
            link("reassign", "Assign owner and deadline…")
            link("cancel", "Cancel the wait…")
        notes.append(Note("wait", undeliverable(h, offers, reassigns=reassigns)))
    elif h.verdict == "FALSE_COMPLETE" and not settled:
        if actions.REOPEN_TASK.name in offers.may:
            if offers.reopen:
                link("reopen", "Reopen the task…")
            else:
                notes.append(Note("reopen", offers.reopen_note))
        if actions.VERIFY_TASK.name in offers.may:
            if offers.reverify:
                link("verify", "Verify again…")
            else:
                notes.append(Note("verify", offers.reverify_note))
        if actions.ACCEPT_TASK.name in offers.may:
            link("accept", "Accept as is…")
            link("resolve", "Mark resolved…")
    return links, notes


def declare_offer(run: Run, user: User, handoffs: list[Handoff]) -> dict | None:
    """The drafts `user` may declare for `run` (admins only, and only where a route was rejected), or None."""
    if not any(h.verdict == "ROUTE_REJECTED" for h in handoffs) or not actions.may_declare(user):
        return None
    drafts = [{"draft": draft, "key": uuid.uuid4().hex} for draft in actions.run_drafts(run)]
    return {"drafts": drafts} if drafts else None


def undeliverable(h: Handoff, offers: Offers, *, reassigns: bool) -> str:
    """Why an open wait cannot be approved or rejected now, and what would unblock it (never silent)."""
    who = "Assign an owner and a deadline, or cancel it (above)" if reassigns else "An operator can assign them"
    if h.verdict == "UNCERTAIN":
        why = (
            f"Approve and reject are not offered: this wait is uncertain ({h.reason}). A decision needs an owner, "
            f"a known reason, a deadline still ahead, a resume token and a persisted state. {who}."
        )
    else:
        boundary = labels.BOUNDARIES.get(h.boundary, h.boundary or "an earlier")
        if h.verdict == "ROUTE_REJECTED":
            unblock = (
                "an admin declares the route (Declare what you saw on the run page, or a contract version in the "
                "admin); the handoff is then judged again and the wait can be decided"
            )
        else:
            unblock = f"{h.next_move or 'reconcile the evidence'}; the handoff is then judged again"
        why = (
            f"Approve and reject are not offered: this handoff failed its {boundary.lower()} boundary ({h.reason}), "
            f"so a decision would resume a transfer that is not proven. What unblocks it: {unblock}"
            f"{'; or an operator cancels the wait' if not reassigns else '; or cancel the wait (above)'}."
        )
    if offers.observed:
        why += " Until then the app's await_decision keeps waiting."
    return why
