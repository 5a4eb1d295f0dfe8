"""What every receipts admin page shares: immutable objects, a review before an add, ISO times, a JSON field."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

from django import forms
from django.contrib import admin
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.utils import timezone

from receipts.ingest import storable

CHANGE_LIMITS = "receipts.change_limits"
CONFIRM_FIELD = "_confirm"
# Immutable things have nothing to continue editing, and another blank "add" is not a next step.
NO_SAVE_VARIANTS = {"show_save_and_add_another": False, "show_save_and_continue": False}


def iso_time(field: str, description: str | None = None) -> Callable[[Any], str]:
    """A list column showing `field` in ISO 8601 (the admin only; the operator pages keep their format)."""

    @admin.display(description=description or field.replace("_", " "), ordering=field)
    def show(obj: Any) -> str:
        value = getattr(obj, field)
        return timezone.localtime(value).isoformat(timespec="seconds") if value else "—"

    show.__name__ = f"{field}_iso"
    return show


class PrettyJSONField(forms.JSONField):
    """A JSON textarea that shows its value indented; a value the database cannot store is an error here."""

    def prepare_value(self, value):
        if isinstance(value, str) and not isinstance(value, forms.fields.InvalidJSONInput):
            try:
                value = json.loads(value)
            except (ValueError, RecursionError):  # not JSON, or nested or long past what Python reads
                return value
        if isinstance(value, forms.fields.InvalidJSONInput):
            return value
        # Escaped where UTF-8 cannot carry it (a lone surrogate): the page is still sent, with the field's error.
        ascii_only = storable.json_problem(value) is not None
        return json.dumps(value, indent=2, ensure_ascii=ascii_only, allow_nan=True)

    def to_python(self, value):
        try:
            return super().to_python(value)
        except RecursionError:
            raise ValidationError("The JSON is nested too deeply to read.", code="invalid") from None
        except ValueError as exc:  # an integer too long to convert (Django words a JSONDecodeError itself)
            raise ValidationError(f"The JSON is not valid: {exc}.", code="invalid") from None

    def bound_data(self, data, initial):
        try:
            return super().bound_data(data, initial)
        except (ValueError, RecursionError):
            return forms.fields.InvalidJSONInput(data)

    def validate(self, value) -> None:
        super().validate(value)
        if (problem := storable.json_problem(value)) is not None:
            raise ValidationError(problem.sentence("The JSON") + ", which cannot be stored.")


class ImmutableAdmin(admin.ModelAdmin):
    """Objects saved once: no "Save and add another", no "Save and continue editing"."""

    def changeform_view(self, request, object_id=None, form_url="", extra_context=None):
        return super().changeform_view(request, object_id, form_url, {**NO_SAVE_VARIANTS, **(extra_context or {})})


class ReviewedAddAdmin(ImmutableAdmin):
    """The add view shows a review first when `review_new` returns one; saving needs its confirmation.

    The confirmation is a digest of the submitted data and of the review itself:
    a change to either after the review asks for a new review.
    """

    def review_new(self, request: HttpRequest, form: forms.ModelForm) -> dict | None:
        raise NotImplementedError

    def add_view(self, request, form_url="", extra_context=None):
        if request.method == "POST" and self.has_add_permission(request):
            form = self.get_form(request, None, change=False)(request.POST, request.FILES)
            if form.is_valid() and (review := self.review_new(request, form)) is not None:
                digest = _digest(request, review)
                if request.POST.get(CONFIRM_FIELD) != digest:
                    return self._render_review(request, review, digest)
        return super().add_view(request, form_url, extra_context)

    def _render_review(self, request: HttpRequest, review: dict, digest: str) -> HttpResponse:
        hidden = [(k, v) for k, values in request.POST.lists() if k not in _NOT_CARRIED for v in values]
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            **review,
            "hidden": hidden,
            "confirm_field": CONFIRM_FIELD,
            "digest": digest,
        }
        return TemplateResponse(request, "admin/review_version.html", context)


_NOT_CARRIED = frozenset({"csrfmiddlewaretoken", CONFIRM_FIELD})


def _digest(request: HttpRequest, review: dict) -> str:
    posted = sorted((k, v) for k, values in request.POST.lists() if k not in _NOT_CARRIED for v in values)
    payload = json.dumps([posted, review], sort_keys=True, default=repr, ensure_ascii=False)
    return hashlib.sha256(payload.encode()).hexdigest()


class ReadOnlyAdmin(ImmutableAdmin):
    """Evidence is recorded by the agents, never edited by hand."""

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
