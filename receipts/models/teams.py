"""Teams: who belongs to one, and which graphs and remote sources it owns (receipts.org.teams scopes by them)."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

# --- issue 22 §2: teams (receipts.org.teams scopes every query by them) ---------------------------


class Team(models.Model):
    """A group of people that owns graphs (by name) and remote sources, and sees only their runs.

    The team that `owns_unclaimed` (the default team, made by migration 0023) also owns every graph and
    source no team claims, and counts among its members every user who belongs to no team.
    """

    slug = models.SlugField(max_length=100, unique=True, help_text="The name identity-provider claims use.")
    name = models.CharField(max_length=200)
    owns_unclaimed = models.BooleanField(
        default=False,
        help_text="The default team: owns the graphs and sources no team claims; users in no team belong to it.",
    )
    members = models.ManyToManyField(
        settings.AUTH_USER_MODEL, through="Membership", related_name="sidewisp_teams", blank=True
    )

    class Meta:
        ordering = ["slug"]
        constraints = [
            models.UniqueConstraint(
                fields=["owns_unclaimed"], condition=models.Q(owns_unclaimed=True), name="one_default_team"
            ),
        ]

    def __str__(self) -> str:
        return self.slug


class Membership(models.Model):
    """A user in a team, set locally (the admin) or through the identity provider's claim (every login)."""

    class Origin(models.TextChoices):
        LOCAL = "local", "Set locally"
        CLAIM = "claim", "From the identity provider's claim"

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="team_memberships")
    origin = models.CharField(max_length=10, choices=Origin.choices, default=Origin.LOCAL)
    created_at = models.DateTimeField(default=timezone.now, editable=False)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["user", "team"], name="one_membership_per_team")]

    def __str__(self) -> str:
        return f"{self.user} in {self.team} ({self.origin})"


class TeamGraph(models.Model):
    """A graph name a team owns: the local runs (hosted and observed) of that graph are the team's."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="graphs")
    graph = models.CharField(max_length=100, unique=True, help_text="A graph has one owner.")

    class Meta:
        ordering = ["graph"]

    def __str__(self) -> str:
        return self.graph


class TeamSource(models.Model):
    """A remote source a team owns: the runs that source's tokens created are the team's."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="sources")
    source_name = models.CharField(max_length=100, unique=True, help_text="A source has one owner.")

    class Meta:
        ordering = ["source_name"]

    def __str__(self) -> str:
        return self.source_name


# --- end issue 22 §2
