"""System checks of the configuration (`manage.py check`, and every `migrate` of a deploy)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import Warning, register

BASE_URL_UNSET = "sidewisp.W001"


@register("sidewisp")
def base_url_is_set(app_configs: Any, **kwargs: Any) -> list[Warning]:
    """In production, links in notifications need SIDEWISP_BASE_URL: its default is a development address."""
    if settings.DEBUG or getattr(settings, "SIDEWISP_BASE_URL_CONFIGURED", True):
        return []
    return [
        Warning(
            f"SIDEWISP_BASE_URL is not set: links in notifications point to {settings.SIDEWISP_BASE_URL}/…, "
            "which operators cannot open.",
            hint="Set SIDEWISP_BASE_URL to the address operators open, e.g. https://sidewisp.example.com.",
            id=BASE_URL_UNSET,
        )
    ]
