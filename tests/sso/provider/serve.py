"""Start the test identity provider: migrate, make its people and its client, serve, print the port."""

from __future__ import annotations

import os
import sys

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.sso.provider.settings")

import django

django.setup()

from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.core.servers.basehttp import ThreadedWSGIServer, WSGIRequestHandler  # noqa: E402
from django.core.wsgi import get_wsgi_application  # noqa: E402
from oauth2_provider.models import Application  # noqa: E402

from tests.sso.provider.validator import people  # noqa: E402


class QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # the provider's request lines are noise
        pass


def prepare() -> None:
    call_command("migrate", verbosity=0)
    users = get_user_model().objects
    for username in people():
        if not users.filter(username=username).exists():
            users.create_user(username, password=os.environ["IDP_PASSWORD"])
    Application.objects.update_or_create(
        client_id=os.environ["IDP_CLIENT_ID"],
        defaults={
            "client_secret": os.environ["IDP_CLIENT_SECRET"],
            "name": "Sidewisp under test",
            "client_type": Application.CLIENT_CONFIDENTIAL,
            "authorization_grant_type": Application.GRANT_AUTHORIZATION_CODE,
            "redirect_uris": os.environ["IDP_REDIRECT_URI"],
            "algorithm": Application.RS256_ALGORITHM,
            "skip_authorization": True,
        },
    )


def main() -> None:
    prepare()
    server = ThreadedWSGIServer(("127.0.0.1", 0), QuietHandler, allow_reuse_address=False)
    server.set_app(get_wsgi_application())
    print(f"listening {server.server_address[1]}", flush=True)
    sys.stdout.close()
    server.serve_forever()


if __name__ == "__main__":
    main()
