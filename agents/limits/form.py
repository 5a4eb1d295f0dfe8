"""The limits as a form: one field per setting of the schema (`agents.limits.setting.schema`), for one scope.

A scope is the default ("default") or one agent ("agents.<name>"). The form
shows the scope's resolved settings; only the fields a user changes are written
into that scope's layer of the document, so an agent's override stays as small
as its changes. The whole document is then checked by `validate_document`,
and each message lands on the field it names (the rest above the form).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from django import forms

from agents.limits import wording
from agents.limits.checks import Checks
from agents.limits.document import LimitsError, resolve
from agents.limits.setting import Setting, schema, setting_of_error, setting_value, with_setting
from agents.limits.validation import validate_document

DEFAULT_SCOPE = "default"
WIDE = {"size": 70}  # messages and name lists are longer than the admin's default input
NAMES_HELP = "Comma-separated names."


def scopes(checks: Checks) -> list[str]:
    """The scopes a form can edit: the default, then every known agent."""
    return [DEFAULT_SCOPE, *(f"agents.{agent}" for agent in sorted(checks.tools_by_agent))]


def field_name(setting: Setting) -> str:
    """The form field of a setting (dots are not welcome in HTML ids)."""
    return setting.path.replace(".", "__")


def scope_settings(document: Mapping[str, Any], scope: str, checks: Checks) -> dict[str, Any]:
    """What the scope runs with today: the values the form starts from."""
    if scope == DEFAULT_SCOPE:
        return resolve({"default": document.get("default") or {}}, "", graph=checks.every_graph())
    agent = scope.removeprefix("agents.")
    return resolve(document, agent, graph=checks.graph_of(agent))


class LimitsSettingsForm(forms.Form):
    """The settings of one scope; `document()` is the whole new document once the form is valid."""

    note = forms.CharField(max_length=200, required=False, help_text="Why (shown in the version list).")

    def __init__(self, *args: Any, document: Mapping[str, Any], scope: str, checks: Checks, **kwargs: Any):
        self.base_document, self.scope, self.checks = document, scope, checks
        self.settings = schema()
        self.current = scope_settings(document, scope, checks)
        initial = {field_name(s): _shown(s, setting_value(self.current, s)) for s in self.settings}
        super().__init__(*args, initial=initial, **kwargs)
        tools = sorted(checks.tools_by_agent.get(scope.removeprefix("agents."), checks.all_tools))
        errors = sorted(checks.retryable_errors or {})
        for setting in self.settings:
            self.fields[field_name(setting)] = _field(setting, tools=tools, errors=errors)
        self.fields["note"] = self.fields.pop("note")  # last, under the settings
        self.new_document: dict[str, Any] | None = None

    def sections(self) -> list[tuple[str, list[forms.BoundField]]]:
        """The fields grouped by middleware section, in the schema's order."""
        grouped: dict[str, list[forms.BoundField]] = {}
        for setting in self.settings:
            grouped.setdefault(wording.section(setting.section), []).append(self[field_name(setting)])
        return list(grouped.items())

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if self.errors:
            return data
        layer = self._layer()
        for setting in self.settings:
            value = data.get(field_name(setting))
            if value != setting_value(self.current, setting):
                layer = with_setting(layer, setting, value)
        document = self._with_layer(layer)
        try:
            self.new_document = validate_document(document, self.checks)
        except LimitsError as exc:
            for error in exc.errors:
                # issue 30 §5: on its field (a section's own problem on the section's first field), in words.
                setting = setting_of_error(error, self.scope, self.settings) or self._section_of(error)
                self.add_error(
                    field_name(setting) if setting else None, wording.message(error, self.scope, self.settings)
                )
        return data

    def _section_of(self, error: str) -> Setting | None:
        """The first setting of the section an error of this scope names as a whole ("scope.section: …")."""
        place = error.split(": ", 1)[0]
        name = place.removeprefix(f"{self.scope}.") if place.startswith(f"{self.scope}.") else None
        return next((s for s in self.settings if s.section == name), None)

    def _layer(self) -> dict[str, Any]:
        if self.scope == DEFAULT_SCOPE:
            return dict(self.base_document.get("default") or {})
        return dict((self.base_document.get("agents") or {}).get(self.scope.removeprefix("agents.")) or {})

    def _with_layer(self, layer: dict[str, Any]) -> dict[str, Any]:
        document = json.loads(json.dumps(dict(self.base_document)))
        if self.scope == DEFAULT_SCOPE:
            document["default"] = layer
        else:
            document.setdefault("agents", {})[self.scope.removeprefix("agents.")] = layer
        return document


def _field(setting: Setting, *, tools: list[str], errors: list[str]) -> forms.Field:
    # issue 30 §5: a human label and help text (agents.limits.wording), the kind's hint after it.
    label, said = wording.label(setting), wording.help_text(setting)

    def helped(hint: str = "") -> str:
        return " ".join(part for part in (said, hint) if part)

    if setting.kind == "bool":
        return forms.BooleanField(label=label, required=False, help_text=helped())
    if setting.kind == "int":
        empty = " Empty: no limit." if setting.nullable else ""
        return forms.IntegerField(label=label, required=False, help_text=helped(f"A whole number.{empty}"))
    if setting.kind == "number":
        return forms.FloatField(label=label, required=False, help_text=helped("A number (seconds or a factor)."))
    if setting.kind == "choice":
        return forms.ChoiceField(label=label, choices=[(c, c) for c in setting.choices], help_text=helped())
    if setting.kind in {"tools", "errors"}:
        known = tools if setting.kind == "tools" else errors
        empty = " Empty: every tool." if setting.nullable else ""
        return NamesField(
            widget=forms.TextInput(attrs=WIDE),
            label=label,
            required=False,
            nullable=setting.nullable,
            help_text=helped(f"{NAMES_HELP}{empty} Known: {', '.join(known) or '—'}."),
        )
    if setting.kind == "lines":
        return LinesField(label=label, required=False, help_text=helped("One per line."))
    if setting.kind == "json":
        return forms.JSONField(
            label=label,
            required=False,
            help_text=helped("JSON."),
            widget=forms.Textarea(attrs={"rows": 3, "cols": 70, "spellcheck": "false"}),
        )
    return forms.CharField(
        label=label, required=False, empty_value="", widget=forms.TextInput(attrs=WIDE), help_text=helped()
    )


def _shown(setting: Setting, value: Any) -> Any:
    """A setting's value as its field shows it."""
    if setting.kind in {"tools", "errors"}:
        return "" if value is None else ", ".join(value)
    if setting.kind == "lines":
        return "\n".join(value or [])
    return value


class NamesField(forms.CharField):
    """A list of names typed as "a, b"; empty is an empty list, or null where null means "every tool"."""

    def __init__(self, *, nullable: bool, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.nullable = nullable

    def to_python(self, value: Any) -> list[str] | None:
        names = [name.strip() for name in (super().to_python(value) or "").split(",") if name.strip()]
        return None if not names and self.nullable else names


class LinesField(forms.CharField):
    """A list of one-line strings, one per line of a textarea."""

    widget = forms.Textarea(attrs={"rows": 3, "cols": 70})

    def to_python(self, value: Any) -> list[str]:
        return [line.strip() for line in (super().to_python(value) or "").splitlines() if line.strip()]
