"""Edited tool arguments checked against the tool's argument schema (plain Python, no Django).

The schema is the minimized JSON schema the agent side keeps per argument
(`type`, `minimum`, `maximum`, `exclusiveMinimum`, `exclusiveMaximum`,
`minLength`, `maxLength`, `enum`, `nullable`). The confirmation form and
`receipts.actions.decide` both use it, so a value the tool would refuse never
uses up a wait's resume token.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

# The JSON schema type an argument takes when only its Python type name is known (no schema recorded).
_FROM_PYTHON = {"int": "integer", "float": "number", "str": "string", "bool": "boolean"}


def schema_for(name: str, schema: Mapping[str, Mapping], arg_types: Mapping[str, str]) -> dict:
    """The argument's schema, or one made from its Python type name."""
    found = schema.get(name)
    if isinstance(found, Mapping) and found.get("type"):
        return dict(found)
    kind = _FROM_PYTHON.get(str(arg_types.get(name, "")))
    return {"type": kind} if kind else {}


def parse(raw: str, schema: Mapping) -> object:
    """A form's text as the schema's type; ValueError with a message for the field."""
    kind = schema.get("type")
    if kind == "integer":
        try:
            return int(raw)
        except ValueError:
            raise ValueError("Must be a whole number.") from None
    if kind == "number":
        try:
            value = float(raw)
        except ValueError:
            raise ValueError("Must be a number.") from None
        if not math.isfinite(value):
            raise ValueError("Must be a finite number.")
        return value
    if kind == "boolean":
        lowered = raw.lower()
        if lowered not in ("true", "false"):
            raise ValueError("Must be true or false.")
        return lowered == "true"
    if kind == "string":
        return raw
    raise ValueError("This argument cannot be edited here.")


def problem(value: object, schema: Mapping) -> str:
    """Why `value` breaks `schema` ("" when it does not)."""
    kind = schema.get("type")
    if kind == "integer" and (isinstance(value, bool) or not isinstance(value, int)):
        return "Must be a whole number."
    if kind == "number" and (isinstance(value, bool) or not isinstance(value, int | float)):
        return "Must be a number."
    if kind == "string" and not isinstance(value, str):
        return "Must be text."
    if kind == "boolean" and not isinstance(value, bool):
        return "Must be true or false."
    if kind not in ("integer", "number", "string", "boolean"):
        return "This argument cannot be edited here."
    if "enum" in schema and value not in schema["enum"]:
        return f"Must be one of {', '.join(map(str, schema['enum']))}."
    if kind in ("integer", "number"):
        return _range_problem(value, schema)
    if kind == "string":
        if "minLength" in schema and len(value) < schema["minLength"]:
            return f"Must be at least {schema['minLength']} characters."
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            return f"Must be at most {schema['maxLength']} characters."
    return ""


def _range_problem(value: float, schema: Mapping) -> str:
    low, high = schema.get("minimum"), schema.get("maximum")
    if (low is not None and value < low) or (high is not None and value > high):
        if low is not None and high is not None:
            return f"Must be between {low} and {high}."
        return f"Must be at least {low}." if low is not None else f"Must be at most {high}."
    if "exclusiveMinimum" in schema and value <= schema["exclusiveMinimum"]:
        return f"Must be more than {schema['exclusiveMinimum']}."
    if "exclusiveMaximum" in schema and value >= schema["exclusiveMaximum"]:
        return f"Must be less than {schema['exclusiveMaximum']}."
    return ""


def problems(edited: Mapping[str, object], schema: Mapping[str, Mapping], arg_types: Mapping[str, str]) -> dict:
    """{argument: why its edited value is refused} for every edited argument that breaks its schema."""
    found = {}
    for name, value in edited.items():
        if reason := problem(value, schema_for(name, schema, arg_types)):
            found[name] = reason
    return found


def describe(schema: Mapping) -> str:
    """The schema in words for a form's help text, e.g. "a whole number from 1 to 100"."""
    kind = {"integer": "a whole number", "number": "a number", "string": "text", "boolean": "true or false"}.get(
        str(schema.get("type")), ""
    )
    if "enum" in schema:
        return f"one of {', '.join(map(str, schema['enum']))}"
    low, high = schema.get("minimum"), schema.get("maximum")
    if low is not None and high is not None:
        return f"{kind} from {low} to {high}"
    if low is not None:
        return f"{kind}, at least {low}"
    if high is not None:
        return f"{kind}, at most {high}"
    return kind
