"""The contract version form as rows (issue 30 §5): routes as rows (sender → receiver → required keys), steps as
rows (the step key, the first step, each step's tools), the contracts' wait reasons as rows (code, meaning), and a
JSON document for export and import.

The rows are widgets of the form's JSON fields: they read the value as the JSON it is and write it back as
JSON, so the contracts parser checks exactly what it checked before. A request that posts the field itself
(`routes=<JSON>`) is read as that JSON. An imported document replaces the rows before anything is checked; a
document that is not JSON is refused naming its line and column.
"""

from __future__ import annotations

import json
import re
from typing import Any

from django import forms
from django.core.exceptions import ValidationError
from django.http import HttpRequest, JsonResponse
from django.template import loader
from django.utils.safestring import mark_safe

from receipts.verdicts import bundle

EXTRA_ROWS = 3  # blank rows under the filled ones, to add routes or steps without a script
MAX_ROWS = 500
IMPORT_FIELD = "document"


def _loaded(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except (ValueError, RecursionError):
            return None
    return value


def _names(text: str) -> list[str]:
    return [name.strip() for name in (text or "").split(",") if name.strip()]


def _indexes(data, name: str, part: str) -> list[int]:
    pattern = re.compile(rf"^{re.escape(name)}-(\d+)-{part}$")
    found = sorted({int(m.group(1)) for key in data if (m := pattern.match(key))})
    return found[:MAX_ROWS]


class _Rows(forms.Widget):
    def _render(self, template_name, context, renderer=None):
        # The project's templates (templates/admin/…), which the default form renderer does not search.
        return mark_safe(loader.render_to_string(template_name, context))

    def id_for_label(self, id_: str) -> str:
        return ""  # many inputs, each labelled by its column: the field's label names the table

    def value_omitted_from_data(self, data, files, name):
        return False


class RouteRows(_Rows):
    """`{"sender": {"receiver": ["key", …]}}` as one row per route."""

    template_name = "admin/receipts/contractversion/_route_rows.html"

    def get_context(self, name, value, attrs):
        context = super().get_context(name, value, attrs)
        routes = _loaded(value)
        rows = []
        if isinstance(routes, dict):
            for sender, receivers in routes.items():
                for receiver, keys in (receivers or {}).items() if isinstance(receivers, dict) else []:
                    rows.append((sender, receiver, ", ".join(map(str, keys or [])) if isinstance(keys, list) else ""))
        rows += [("", "", "")] * EXTRA_ROWS
        context["rows"] = [(i, *row) for i, row in enumerate(rows)]
        return context

    def value_from_datadict(self, data, files, name):
        if name in data:  # the JSON itself (an import, or a client that posts JSON)
            return data[name]
        routes: dict[str, dict[str, list[str]]] = {}
        for i in _indexes(data, name, "sender"):
            sender = data.get(f"{name}-{i}-sender", "").strip()
            receiver = data.get(f"{name}-{i}-receiver", "").strip()
            keys = _names(data.get(f"{name}-{i}-keys", ""))
            if sender or receiver or keys:
                routes.setdefault(sender, {})[receiver] = keys
        return json.dumps(routes)


class StepRows(_Rows):
    """`{"key": …, "first": …, "tools": {"step": ["tool", …]}}` as the key, the first step and a row per step."""

    template_name = "admin/receipts/contractversion/_step_rows.html"

    def get_context(self, name, value, attrs):
        context = super().get_context(name, value, attrs)
        steps = _loaded(value)
        steps = steps if isinstance(steps, dict) else {}
        tools = steps.get("tools") if isinstance(steps.get("tools"), dict) else {}
        rows = [(step, ", ".join(map(str, names)) if isinstance(names, list) else "") for step, names in tools.items()]
        rows += [("", "")] * EXTRA_ROWS
        context.update(key=steps.get("key") or "", first=steps.get("first") or "")
        context["rows"] = [(i, *row) for i, row in enumerate(rows)]
        return context

    def value_from_datadict(self, data, files, name):
        if name in data:
            return data[name]
        key, first = data.get(f"{name}-key", "").strip(), data.get(f"{name}-first", "").strip()
        tools = {}
        for i in _indexes(data, name, "step"):
            step, names = data.get(f"{name}-{i}-step", "").strip(), _names(data.get(f"{name}-{i}-tools", ""))
            if step or names:
                tools[step] = names
        if not (key or first or tools):
            return "null"  # no steps (most versions have none)
        steps: dict[str, Any] = {"key": key}
        if first:
            steps["first"] = first
        steps["tools"] = tools
        return json.dumps(steps)


class WaitReasonRows(_Rows):
    """The contracts' wait reasons (spec §2 `wait_reasons`) as one row per reason: its code and what it means.

    The value is a JSON list whose entries are a code (as the contracts document and an import hold them) or a
    `[code, description]` pair (as the rows post them); rows are kept as typed, even invalid ones, so that an
    error stays on the row it is about (`row_errors`, row index → words, set by the form when it cleans).
    """

    template_name = "admin/receipts/contractversion/_wait_reason_rows.html"

    def __init__(self, attrs=None):
        super().__init__(attrs)
        self.row_errors: dict[int, str] = {}
        self.kept: frozenset[str] = frozenset()  # the stored codes: kept, never renamed or removed here

    def get_context(self, name, value, attrs):
        context = super().get_context(name, value, attrs)
        rows = reason_rows(_loaded(value))
        rows += [("", "")] * EXTRA_ROWS
        context["rows"] = [
            (i, code, description, code in self.kept, self.row_errors.get(i, ""))
            for i, (code, description) in enumerate(rows)
        ]
        return context

    def value_from_datadict(self, data, files, name):
        if name in data:
            return data[name]
        indexes = _indexes(data, name, "code")
        if not indexes:
            return "null"  # no rows posted (a client that posts routes only): the stored reasons, unchanged
        rows = []
        for i in indexes:
            code = data.get(f"{name}-{i}-code", "").strip()
            description = data.get(f"{name}-{i}-description", "").strip()
            if code or description:
                rows.append([code, description])
        return json.dumps(rows)


def reason_rows(value: Any) -> list[tuple[str, str]]:
    """The (code, description) rows of a wait reasons value; an entry of another shape becomes its text."""
    rows = []
    for entry in value if isinstance(value, list) else []:
        if isinstance(entry, list | tuple) and len(entry) == 2 and all(isinstance(part, str) for part in entry):
            rows.append((entry[0], entry[1]))
        else:
            rows.append((entry if isinstance(entry, str) else json.dumps(entry), ""))
    return rows


def document_field() -> forms.CharField:
    return forms.CharField(
        required=False,
        label="Import JSON",
        widget=forms.Textarea(attrs={"rows": 6, "cols": 90, "spellcheck": "false"}),
        help_text=(
            'Optional: a whole version as JSON ({"version": …, "routes": {…}, "steps": {…}, "wait_reasons": […]}, as '
            'the version\'s "Export JSON" gives it). It replaces the rows above.'
        ),
    )


def imported(data) -> tuple[Any, str]:
    """The form data with an imported document's routes, steps, wait reasons and version in place of the rows, and the
    import's error ("" when there is none, or nothing to import)."""
    text = (data or {}).get(IMPORT_FIELD, "")
    if not text.strip():
        return data, ""
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        return data, f"The JSON is not valid at line {exc.lineno}, column {exc.colno}: {exc.msg}."
    except RecursionError:
        return data, "The JSON is nested too deeply to read."
    if not isinstance(document, dict) or not isinstance(document.get("routes"), dict):
        return data, 'The document must be an object with a "routes" object.'
    data = data.copy()
    data["routes"] = json.dumps(document["routes"])
    data["steps"] = json.dumps(document.get("steps"))
    if "wait_reasons" in document:  # an older export without them keeps the wait reasons rows as they are
        data["wait_reasons"] = json.dumps(document["wait_reasons"])
    if isinstance(document.get("version"), str) and document["version"]:
        data["version"] = document["version"]
    return data, ""


class ImportsDocument:
    """A form mixin: `document` (an imported JSON version) replaces the routes, steps and wait reasons rows."""

    def __init__(self, data=None, *args, **kwargs):
        data, self.import_error = imported(data) if data is not None else (data, "")
        super().__init__(data, *args, **kwargs)

    def clean_document(self) -> str:
        if self.import_error:
            raise ValidationError(self.import_error)
        return ""


def exported(version, wait_reasons: list[str]) -> dict[str, Any]:
    """A contract version as the JSON document "Import JSON" reads back, with the contracts' wait reasons.

    Wait reasons belong to the whole contracts document, not to one version (spec §2: a wait's reason is checked
    against `wait_reasons` whatever its route version): the export carries the list in force when it is made.
    """
    document: dict[str, Any] = {"version": version.version, "routes": version.routes}
    if version.steps is not None:
        document["steps"] = version.steps
    document["wait_reasons"] = wait_reasons
    return document


def export_response(request: HttpRequest, version, wait_reasons: list[str]) -> JsonResponse:
    document = exported(version, wait_reasons)
    response = JsonResponse(document, json_dumps_params={"indent": 2, "ensure_ascii": False})
    safe_name = re.sub(r"[^A-Za-z0-9._-]+", "-", version.version)
    response["Content-Disposition"] = f'attachment; filename="contract-{safe_name}.json"'
    return response


def checked_wait_reasons(value: Any, stored: list[str]) -> tuple[list[tuple[str, str]], dict[int, str], list[str]]:
    """The wait reasons rows as (code, description), each row's problem in words (row index → words), and the
    problems of the list as a whole.

    A code is checked as the contracts parser checks `wait_reasons` (spec §2); a stored code may not be left out
    (renamed or removed): waits and approval rules name it, and a wait whose reason is not declared is UNCERTAIN.
    """
    if isinstance(value, str):
        value = _loaded(value)
    if value is None:
        value = list(stored)
    if not isinstance(value, list):
        return [], {}, ['Wait reasons must be a list of codes, e.g. ["purchase_approval"].']
    rows = reason_rows(value)
    row_errors: dict[int, str] = {}
    seen: set[str] = set()
    for i, (code, description) in enumerate(rows):
        problem = _code_problem(code, description, seen)
        if problem:
            row_errors[i] = f"Wait reason {i + 1}: {problem}"
        seen.add(code)
    problems = []
    if len(rows) > MAX_REASONS:
        problems.append(f"At most {MAX_REASONS} wait reasons; this list has {len(rows)}.")
    if left_out := [code for code in stored if code not in seen]:
        problems.append(
            f"{', '.join(left_out)} cannot be left out: waits and approval rules name the stored wait reasons, so "
            "they are kept (add new ones; never rename or remove one here)."
        )
    return rows, row_errors, problems


MAX_REASONS = 100  # the contracts parser's most list entries


def _code_problem(code: str, description: str, seen: set[str]) -> str:
    if not code:
        return f"the meaning “{description}” has no code; type the code a wait names, or clear the row."
    if code in seen:
        return f"{code} is listed twice."
    try:
        bundle.parse_contracts({"wait_reasons": [code], "routes": {}})
    except bundle.BundleError as exc:
        return f"the code {exc.message}."
    if len(code) > 200 or len(description) > 200:
        return "a code and its meaning are at most 200 characters each."
    return ""
