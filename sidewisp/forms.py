"""Forms of the operator actions and the audit page. They parse input; receipts.actions decides."""

from __future__ import annotations

import uuid
from collections.abc import Mapping

from django import forms

from receipts.models import AuditEntry
from sidewisp import labels

MAX_DEADLINE_MINUTES = 30 * 24 * 60
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


class DecisionForm(ActionForm):
    """Approve, reject or edit. For edit, one optional field per argument name of the pending tool call."""

    decision = forms.ChoiceField(choices=[(k, k) for k in ("approve", "reject", "edit")], widget=forms.HiddenInput)
    token = forms.CharField(max_length=200, widget=forms.HiddenInput)

    def __init__(self, *args, arg_types: Mapping[str, str] | None = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.arg_types = dict(arg_types or {})
        for name in sorted(self.arg_types):
            # The current value is never shown (tool arguments stay off pages): empty keeps it.
            self.fields[f"arg_{name}"] = forms.CharField(
                required=False, max_length=200, label=f"New value for {name}", help_text="Empty keeps the value."
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
        for name, kind in self.arg_types.items():
            raw = (cleaned.get(f"arg_{name}") or "").strip()
            if not raw:
                continue
            if kind == "int":
                try:
                    edited[name] = int(raw)
                except ValueError:
                    self.add_error(f"arg_{name}", "Must be a whole number.")
            elif kind == "str":
                edited[name] = raw
            else:
                self.add_error(f"arg_{name}", "This argument cannot be edited here.")
        return edited


class ReassignForm(ActionForm):
    owner = forms.CharField(max_length=150, help_text="The username who decides this wait")
    deadline_minutes = forms.IntegerField(min_value=1, max_value=MAX_DEADLINE_MINUTES, initial=60)


class AuditFilterForm(forms.Form):
    actor = forms.CharField(required=False, max_length=150)
    action = forms.ChoiceField(required=False)
    verdict = forms.ChoiceField(required=False)
    outcome = forms.ChoiceField(required=False, choices=[("", "Any outcome"), *AuditEntry.Outcome.choices])
    since = forms.DateTimeField(required=False, label="From (UTC)")
    until = forms.DateTimeField(required=False, label="Before (UTC)")
    page = forms.IntegerField(required=False, min_value=1, widget=forms.HiddenInput)

    def __init__(self, *args, actions: list[str] | None = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.fields["action"].choices = [("", "Any action"), *((a, a) for a in actions or [])]
        self.fields["verdict"].choices = [("", "Any verdict"), *((v, label[1]) for v, label in labels.VERDICTS.items())]
        for name in ("since", "until"):
            self.fields[name].widget.input_type = "datetime-local"

    def filters(self) -> dict:
        """The valid filters as ORM lookups; an invalid field is ignored (and shown as an error)."""
        self.is_valid()
        data = getattr(self, "cleaned_data", {})
        lookups = {
            "actor": "actor_name__iexact",
            "action": "action",
            "verdict": "verdict",
            "outcome": "outcome",
            "since": "at__gte",
            "until": "at__lt",
        }
        return {lookup: data[name] for name, lookup in lookups.items() if data.get(name) not in (None, "")}
