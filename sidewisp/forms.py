"""Forms of the operator actions. They parse input; receipts.actions decides.

The list pages' filter forms are their pages' own (sidewisp.pages.filters, sidewisp.pages.audit).
"""

from __future__ import annotations

import json
import re
import unicodedata
import uuid
from collections.abc import Iterable, Mapping

from django import forms

from receipts.actions import arguments
from receipts.ingest import storable

MAX_DEADLINE_MINUTES = 30 * 24 * 60
MAX_INPUT_BYTES = 20_000
MAX_OPERATION_ID = 200
KEY_PATTERN = r"^[0-9a-f]{32}$"


def new_key() -> str:
    """A fresh idempotency key for one confirmation page: submitting it twice does the work once."""
    return uuid.uuid4().hex


class ActionForm(forms.Form):
    """An idempotency key and a reason (required where `reason_required`)."""

    key = forms.RegexField(regex=KEY_PATTERN, widget=forms.HiddenInput, error_messages={"invalid": "bad key"})
    reason = forms.CharField(
        max_length=500,
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="Why (kept in the audit log)",
    )

    def __init__(self, *args, reason_required: bool = False, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.fields["reason"].required = reason_required

    def clean_reason(self) -> str:
        reason = self.cleaned_data["reason"].strip()
        if self.fields["reason"].required and not reason:
            raise forms.ValidationError("A reason is required.")
        return reason


class DeclareForm(ActionForm):
    """Declare a drafted contract version: its name and the digest of the draft the page showed."""

    version = forms.CharField(max_length=200, widget=forms.HiddenInput)
    digest = forms.RegexField(
        regex=r"^[0-9a-f]{16}$", widget=forms.HiddenInput, error_messages={"invalid": "bad digest"}
    )


class DecisionForm(ActionForm):
    """Approve, reject or edit. For edit, one optional field per argument name of the pending tool call."""

    decision = forms.ChoiceField(choices=[(k, k) for k in ("approve", "reject", "edit")], widget=forms.HiddenInput)
    token = forms.CharField(max_length=200, widget=forms.HiddenInput)

    def __init__(
        self,
        *args,
        arg_types: Mapping[str, str] | None = None,
        arg_schema: Mapping[str, Mapping] | None = None,
        **kwargs,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.arg_types = dict(arg_types or {})
        # Each argument's schema (the tool's declared type and range): an edit it refuses is an error here,
        # next to its field, before the wait's resume token is used.
        schema = arg_schema or {}
        self.arg_schema = {name: arguments.schema_for(name, schema, self.arg_types) for name in self.arg_types}
        for name in sorted(self.arg_types):
            described = arguments.describe(self.arg_schema[name])
            self.fields[f"arg_{name}"] = forms.CharField(
                required=False,
                max_length=200,
                label=f"New value for {name}",
                help_text=f"{described.capitalize()}. Empty keeps the value." if described else "Empty keeps it.",
            )
        self.fields["reason"].help_text = "Required to reject; kept in the audit log"

    def clean(self) -> dict:
        cleaned = super().clean()
        kind = cleaned.get("decision")
        if kind == "reject" and not cleaned.get("reason"):
            self.add_error("reason", "A reason is required to reject.")
        if kind == "edit":
            cleaned["edited_args"] = self._edited_args(cleaned)
            if not cleaned["edited_args"] and not self.errors:
                raise forms.ValidationError("Change at least one argument, or approve as is.")
        return cleaned

    def _edited_args(self, cleaned: dict) -> dict:
        edited: dict = {}
        for name in self.arg_types:
            raw = (cleaned.get(f"arg_{name}") or "").strip()
            if not raw:
                continue
            schema = self.arg_schema[name]
            try:
                value = arguments.parse(raw, schema)
            except ValueError as exc:
                self.add_error(f"arg_{name}", str(exc))
                continue
            if problem := arguments.problem(value, schema):
                self.add_error(f"arg_{name}", problem)
            else:
                edited[name] = value
        return edited


class ReassignForm(ActionForm):
    # Any name parses; receipts.actions.reassign accepts only someone who may decide the wait (and audits a refusal).
    owner = forms.CharField(max_length=150, help_text="The username who decides this wait")
    deadline_minutes = forms.IntegerField(min_value=1, max_value=MAX_DEADLINE_MINUTES, initial=60)

    def offer_owners(self, usernames: Iterable[str]) -> None:
        """Offer only these owners (receipts.actions.wait_owner_candidates) as a list to choose from."""
        names = list(usernames)
        empty = "Choose who decides it" if names else "Nobody you may choose can decide this wait"
        self.fields["owner"].widget = forms.Select(choices=[("", empty), *((name, name) for name in names)])
        self.fields["owner"].help_text = "Only people who may decide this wait (yourself only with decide-any)"


class StartRunForm(ActionForm):
    """A hosted run to start: a registered graph, its input as a JSON object, optionally its operation id."""

    graph = forms.ChoiceField(help_text="A graph registered with Sidewisp's workers")
    graph_input = forms.CharField(
        label="Input (a JSON object)",
        strip=False,
        widget=forms.Textarea(attrs={"rows": 8, "spellcheck": "false", "class": "mono"}),
        help_text="What the graph is invoked with, at most 20 kB. Kept with the run; never shown on a page "
        "or written to the audit log (only its top-level key names are).",
    )
    operation_id = forms.CharField(
        label="Operation id (optional)",
        required=False,
        max_length=MAX_OPERATION_ID,
        help_text="A stable id of your own; empty picks a fresh one",
    )

    field_order = ["graph", "graph_input", "operation_id", "reason", "key"]

    def __init__(self, *args, graphs: Iterable[str] = (), **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.fields["graph"].choices = [(name, name) for name in graphs]

    def clean_graph_input(self) -> dict:
        raw = self.cleaned_data["graph_input"]
        if len(raw.encode()) > MAX_INPUT_BYTES:
            raise forms.ValidationError(f"The input is {len(raw.encode()):,} bytes; at most 20 kB (20,000 bytes).")
        try:
            value = json.loads(raw, parse_constant=_no_constant)
        except json.JSONDecodeError as exc:
            raise forms.ValidationError(
                f"The input is not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}."
            ) from None
        except (ValueError, RecursionError) as exc:
            raise forms.ValidationError(f"The input is not valid JSON: {exc}.") from None
        if not isinstance(value, dict):
            raise forms.ValidationError(f"The input must be a JSON object ({{…}}), not {_json_kind(value)}.")
        if problem := storable.json_problem(value):
            raise forms.ValidationError(problem.sentence("The input") + ", which cannot be stored.")
        return value

    def clean_operation_id(self) -> str:
        value = self.cleaned_data["operation_id"]
        if problem := operation_id_problem(value):
            raise forms.ValidationError(f"The operation id {problem}.")
        return value


# Like receipts.verdicts.bundle's ids: Cc controls and newlines, Cf invisible bidi overrides, Cs surrogates,
# Zl/Zp line breaks. Path separators anywhere (drive paths included), a home prefix, file: URLs, . and ..
_CONTROL_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
_PATH = re.compile(r"[/\\]|^~|file:|^\.\.?$", re.IGNORECASE)


def operation_id_problem(value: str) -> str:
    """Why `value` cannot be an operation id ("" when it can)."""
    if len(value) > MAX_OPERATION_ID:
        return f"is longer than {MAX_OPERATION_ID} characters"
    if any(unicodedata.category(char) in _CONTROL_CATEGORIES for char in value):
        return "must not contain control characters"
    if _PATH.search(value):
        return "must not be a path (no / or \\, no leading ~, no file:)"
    return ""


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not a JSON number")


def _json_kind(value: object) -> str:
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    return "a number"
