"""Why a sign-in was refused: one code for the log line, and the words the refusal page says.

No refusal carries a token, a code, a secret or the identity provider's own error text.
"""

from __future__ import annotations

# code: (HTTP status, what the page says)
REFUSALS: dict[str, tuple[int, str]] = {
    "state": (
        400,
        "This sign-in did not start in this browser, or it was already completed: each sign-in link "
        "works once (state).",
    ),
    "provider_error": (403, "The identity provider did not sign you in (it answered “{error}”)."),
    "unreachable": (503, "The identity provider does not answer, so nobody can sign in with it just now."),
    "discovery": (502, "The identity provider cannot be used: {problem}. An administrator must check its settings."),
    "code_refused": (
        403,
        "The identity provider refused the code of this sign-in (a code works once, and only for a short time).",
    ),
    "no_id_token": (403, "The identity provider sent no ID token, so it did not say who you are."),
    "signature": (403, "The ID token's signature does not verify against the identity provider's keys."),
    "audience": (403, "The ID token was issued for another application, not for this Sidewisp (audience)."),
    "expired": (403, "The ID token has expired (or is not valid yet): the sign-in took too long or a clock is off."),
    "issuer": (403, "The ID token was issued by another identity provider than the configured one (issuer)."),
    "claims": (403, "The ID token lacks a claim it must carry ({claim})."),
    "nonce": (
        403,
        "The ID token belongs to another sign-in (nonce): it was replayed, or the sign-in was started twice.",
    ),
    "userinfo": (403, "The identity provider refused to say who you are (its user information answer)."),
    "busy": (409, "Another sign-in for this account was being made at the same moment; sign in again."),
    "subject": (403, "The identity provider's user information names another person than its ID token."),
    "username": (
        403,
        "The identity provider gives no usable user name ({claim} must be letters, digits and @ . + - _, "
        "at most 150 characters).",
    ),
    "username_taken": (
        403,
        "The identity provider names you “{username}”, which is a local account here. Ask an admin: an "
        "account signed in with single sign-on never takes over a local one.",
    ),
    "inactive": (403, "Your Sidewisp account “{username}” is deactivated."),
    "throttled": (429, "Logging in from this address is paused after too many failed attempts; try again later."),
    "groups": (403, "The identity provider's {claim} claim is not a list of group names."),
}


class SignInRefused(Exception):
    """A sign-in that stops here: nothing is logged in, and no half-made account is left behind."""

    def __init__(self, code: str, **facts: str) -> None:
        super().__init__(code)
        self.code = code
        self.facts = facts

    @property
    def status(self) -> int:
        return REFUSALS[self.code][0]

    @property
    def words(self) -> str:
        return REFUSALS[self.code][1].format(**self.facts)


class NoRole(Exception):
    """The identity provider signed the person in, but none of their groups maps to a Sidewisp role."""

    def __init__(self, username: str, groups: list[str]) -> None:
        super().__init__(username)
        self.username = username
        self.groups = groups
