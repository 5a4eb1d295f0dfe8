"""Notification channels, alert rules and deliveries in the admin (issue 14 §1).

Editing needs the model permissions (the admin role holds them, migration 0013): default deny.
"""

from __future__ import annotations

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.core.exceptions import ValidationError

from receipts.admin.base import ReadOnlyAdmin, iso_time
from receipts.models import AlertRule, Delivery, NotificationChannel
from receipts.notify import destinations
from receipts.verdicts import bundle, words


class NotificationChannelForm(forms.ModelForm):
    """Each kind asks for its own fields; the secret is write-only (blank keeps the stored one)."""

    url = forms.URLField(
        required=False, max_length=500, assume_scheme="https", help_text="Webhook and Slack: where to POST."
    )
    secret = forms.CharField(
        required=False,
        widget=forms.PasswordInput(render_value=False),
        help_text="Webhook only: the HMAC-SHA256 key. Blank keeps the stored secret.",
    )

    class Meta:
        model = NotificationChannel
        fields = ["name", "kind", "user", "group", "email", "url", "secret", "active"]

    def clean_name(self) -> str:
        return _checked_text(self.cleaned_data["name"])

    def clean_secret(self) -> str:
        return self.cleaned_data["secret"] or (self.instance.secret if self.instance.pk else "")

    def clean(self):
        data = super().clean()
        kind = data.get("kind")
        if data.get("user") and data.get("group"):
            self.add_error("group", "A channel belongs to a user or to a group, not both.")
        if kind in (NotificationChannel.Kind.WEBHOOK, NotificationChannel.Kind.SLACK) and not data.get("url"):
            self.add_error("url", "A webhook needs the URL to post to.")
        if kind == NotificationChannel.Kind.WEBHOOK and not data.get("secret"):
            self.add_error("secret", "A webhook needs a secret: receivers check the signature with it.")
        if kind == NotificationChannel.Kind.EMAIL and data.get("url"):
            self.add_error("url", "An e-mail channel has no URL.")
        return data


@admin.register(NotificationChannel)
class NotificationChannelAdmin(admin.ModelAdmin):
    form = NotificationChannelForm
    # Never the URL or the secret in a list: a Slack URL is a credential.
    list_display = ["name", "kind", "user", "group", "active"]
    list_filter = ["kind", "active"]
    search_fields = ["name", "user__username", "group__name"]
    list_select_related = ["user", "group"]

    def save_model(self, request, obj, form, change):
        super().save_model(request, obj, form, change)
        # Saved all the same (an allowed network may be added later): the admin is told now, not at the first send.
        if obj.url and (
            warning := destinations.literal_address_warning(obj.url, settings.SIDEWISP_WEBHOOK_ALLOW_NETWORKS)
        ):
            self.message_user(request, warning, level=messages.WARNING)


class AlertRuleForm(forms.ModelForm):
    # issue 30 §4: the verdicts by their words (receipts.verdicts.words), HEALTHY not offered as an alert.
    verdict = forms.TypedChoiceField(
        required=False,
        choices=[("", "— (not a verdict rule)"), *words.alert_choices()],
        help_text="Verdict rules: the verdict that fires the alert once a handoff settles in it.",
    )
    # issue 30 §5: a window rule counts the verdicts chosen here by their words; none chosen: every non-healthy one.
    verdicts = forms.MultipleChoiceField(
        required=False,
        label="Verdicts counted",
        choices=words.alert_choices(),
        widget=forms.CheckboxSelectMultiple,
        help_text="Window rules: count only handoffs settled in these verdicts; none chosen: every non-healthy one.",
    )

    class Meta:
        model = AlertRule
        fields = [
            "name",
            "kind",
            "verdict",
            "verdicts",
            "agent",
            "threshold",
            "window_minutes",
            "channel",
            "cooldown_minutes",
            "muted_until",
            "active",
            "team",  # issue 22 §2
        ]

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        # The admin's date and time inputs have no label of their own (axe: every input is named).
        parts = getattr(self.fields["muted_until"].widget, "widgets", [])
        for widget, part in zip(parts, ("date", "time"), strict=False):
            widget.attrs.setdefault("aria-label", f"Muted until: {part}")

    def clean_name(self) -> str:
        return _checked_text(self.cleaned_data["name"])

    def clean_verdicts(self) -> list[str]:
        chosen = set(self.cleaned_data["verdicts"])
        return [code for code in words.ALERTABLE if code in chosen]  # one order, however they were ticked

    def clean_agent(self) -> str:
        agent = self.cleaned_data["agent"].strip()
        if not agent:
            return ""
        try:
            return bundle.parse_name(agent, "agent")
        except bundle.BundleError as exc:
            raise ValidationError(f"The agent {exc.message}.") from None

    def clean(self):
        data = super().clean()
        kind = data.get("kind")
        if kind == AlertRule.Kind.VERDICT and not data.get("verdict"):
            self.add_error("verdict", "A verdict rule needs the verdict it watches.")
        if kind in (AlertRule.Kind.VERDICT, AlertRule.Kind.WINDOW) and not data.get("window_minutes"):
            self.add_error("window_minutes", "The window must be at least one minute.")
        if data.get("verdicts") and kind != AlertRule.Kind.WINDOW:
            self.add_error(
                "verdicts",
                "Only a window rule counts the verdicts chosen here; a verdict rule watches the one verdict above.",
            )
        return data


@admin.register(AlertRule)
class AlertRuleAdmin(admin.ModelAdmin):
    form = AlertRuleForm
    list_display = [
        "name",
        "kind",
        "verdict_words",
        "agent",
        "channel",
        "team",
        "active",
        "firing",
        "announced",
        iso_time("muted_until", "muted until"),
    ]
    list_filter = ["kind", "active", "firing", "team"]
    search_fields = ["name", "agent"]
    list_select_related = ["channel", "team"]
    readonly_fields = ["firing", "announced", "fired_at", "notices", "changed_at"]

    @admin.display(description="verdict", ordering="verdict")
    def verdict_words(self, rule: AlertRule) -> str:
        return words.verdict_words(rule.verdict) if rule.verdict else "—"


@admin.register(Delivery)
class DeliveryAdmin(ReadOnlyAdmin):
    """What was sent where, and why not: an error class or an HTTP status, never the URL or a secret."""

    list_display = [
        iso_time("created_at", "created"),
        "event",
        "channel",
        "recipient",
        "status",
        "attempts",
        "last_error",
    ]
    list_filter = ["status", "event"]
    search_fields = ["recipient", "key"]
    list_select_related = ["channel"]
    actions = None


def _checked_text(value: str) -> str:
    if (problem := bundle.text_problem(value)) is not None:
        raise ValidationError(f"This {problem}.")
    return value
