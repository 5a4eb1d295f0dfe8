"""A real OpenID Connect provider on loopback (tests/sso/provider, its own process) and a browser for it.

The provider starts once per test session, after the live server whose callback it must know. Each test
starts from the same people (`PEOPLE`); a test changes someone's groups with `identity_provider.set(...)`.
"""

from __future__ import annotations

import html
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

BASE_DIR = Path(__file__).resolve().parents[2]
CLIENT_ID = "sidewisp-under-test"
CLIENT_SECRET = "client-secret-4c1f9e0b7d2a4e68a5b3"
PASSWORD = "correct horse battery staple"
GROUP_MAP = {
    "sre": {"roles": ["operator"], "teams": ["payments"]},
    "approvers": "approver",
    "ops-admins": ["admin"],
}
PEOPLE = {
    "alice": {"groups": ["sre"]},
    "bob": {"groups": ["approvers", "all-staff"]},
    "carol": {"groups": ["marketing", "all-staff"]},
    "ops-lead": {"groups": ["sre"]},  # also a local account of Sidewisp's
    "late": {"groups": ["sre"], "fault": "expired"},
    "elsewhere": {"groups": ["sre"], "fault": "wrong-audience"},
    "impostor": {"groups": ["sre"], "fault": "wrong-issuer"},
    "replayer": {"groups": ["sre"], "fault": "stale-nonce"},
}


@dataclass
class IdentityProvider:
    issuer: str
    people_file: Path

    def set(self, username: str, *, groups: list[str]) -> None:
        """Change a person's groups at the provider (read again at their next sign-in)."""
        people = json.loads(self.people_file.read_text())
        people[username]["groups"] = groups
        self.people_file.write_text(json.dumps(people))

    def reset(self) -> None:
        self.people_file.write_text(json.dumps(PEOPLE))


@pytest.fixture(scope="session")
def identity_provider(live_server, tmp_path_factory) -> Iterator[IdentityProvider]:
    folder = tmp_path_factory.mktemp("identity-provider")
    provider = IdentityProvider(issuer="", people_file=folder / "people.json")
    provider.reset()
    env = os.environ | {
        "DJANGO_SETTINGS_MODULE": "tests.sso.provider.settings",
        "IDP_DATABASE": str(folder / "provider.sqlite3"),
        "IDP_PEOPLE": str(provider.people_file),
        "IDP_PASSWORD": PASSWORD,
        "IDP_CLIENT_ID": CLIENT_ID,
        "IDP_CLIENT_SECRET": CLIENT_SECRET,
        "IDP_REDIRECT_URI": f"{live_server.url}/sso/callback/",
    }
    errors = (folder / "stderr.txt").open("w")
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.sso.provider.serve"],
        cwd=BASE_DIR,
        env=env,
        stdout=subprocess.PIPE,
        stderr=errors,
        text=True,
    )
    try:
        line = process.stdout.readline()  # the port once it serves; empty if it died
        found = re.fullmatch(r"listening (\d+)\n", line)
        assert found, f"the identity provider did not start: {(folder / 'stderr.txt').read_text()[-2000:]}"
        provider.issuer = f"http://127.0.0.1:{found.group(1)}/o"
        yield provider
    finally:
        process.terminate()
        process.wait(timeout=30)
        errors.close()


@pytest.fixture
def sso(settings, identity_provider, transactional_db):
    """Single sign-on on, against the test provider; the role groups and the `payments` team exist."""
    from receipts.models import Team
    from receipts.org.roles import ensure_groups
    from sidewisp.sso import discovery
    from sidewisp.sso.config import SsoConfig, parse_group_map

    identity_provider.reset()
    discovery.forget()
    ensure_groups()
    Team.objects.get_or_create(slug="payments", defaults={"name": "Payments"})
    # The live server speaks plain http on loopback: cookies marked Secure would never come back from the browser.
    settings.SESSION_COOKIE_SECURE = settings.CSRF_COOKIE_SECURE = False
    settings.SIDEWISP_OIDC = SsoConfig(
        issuer=identity_provider.issuer,
        client_id=CLIENT_ID,
        client_secret=CLIENT_SECRET,
        group_map=parse_group_map("SIDEWISP_OIDC_GROUP_MAP", json.dumps(GROUP_MAP)),
        name="Example IdP",
        timeout=10.0,
    )
    return settings.SIDEWISP_OIDC


def sign_in(live_server, username: str, *, next_page: str = "") -> requests.Response:
    """Click "Sign in with …" on Sidewisp's log-in page, type the password at the provider, follow every redirect."""
    browser = requests.Session()
    page = browser.get(f"{live_server.url}/login/", params={"next": next_page} if next_page else None, timeout=30)
    start = re.search(r'id="sso-login"><a href="([^"]+)"', page.text)
    assert start, "the log-in page has no single-sign-on button"
    at_provider = browser.get(live_server.url + html.unescape(start.group(1)), timeout=30)
    assert at_provider.url.startswith("http://127.0.0.1:"), at_provider.url
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', at_provider.text).group(1)
    form = {"username": username, "password": PASSWORD, "csrfmiddlewaretoken": token}
    response = browser.post(at_provider.url, data=form, timeout=30)
    response.browser = browser
    return response


def callback_url(response: requests.Response) -> str:
    """The callback URL (with its code and state) that the provider sent the browser to."""
    return next(hop.url for hop in [*response.history, response] if "/sso/callback/" in hop.url)
