"""Forwarded headers count only from a proxy the operator named (SIDEWISP_TRUSTED_PROXIES).

Requests go through the real ASGI application: the scope's peer address is what a socket would say.
"""

from __future__ import annotations

import ipaddress

import pytest
from asgiref.sync import async_to_sync
from asgiref.testing import ApplicationCommunicator
from django.core.asgi import get_asgi_application
from django.test import override_settings

from sidewisp.web.proxies import TrustedProxyHeaders, forwarded_scope

PROXY = "10.9.9.9"
PROXIES = (ipaddress.ip_network("10.9.9.0/24"),)
METRICS_ALLOW = (ipaddress.ip_network("127.0.0.1/32"),)


def scope(peer: str, *headers: tuple[bytes, bytes], kind: str = "http", path: str = "/healthz") -> dict:
    return {
        "type": kind,
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http" if kind == "http" else "ws",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "headers": [(b"host", b"localhost"), *headers],
        "client": (peer, 41000),
        "server": ("127.0.0.1", 8000),
    }


def get(app, request_scope: dict) -> dict:
    async def exchange():
        communicator = ApplicationCommunicator(app, request_scope)
        await communicator.send_input({"type": "http.request", "body": b""})
        start = await communicator.receive_output(10)
        await communicator.wait(10)
        return start

    return async_to_sync(exchange)()


# --- the rule ----------------------------------------------------------------------------------


def test_an_untrusted_peer_s_forwarded_headers_change_nothing():
    spoofed = scope("198.51.100.5", (b"x-forwarded-proto", b"https"), (b"x-forwarded-for", b"127.0.0.1"))

    seen = forwarded_scope(spoofed, PROXIES)

    assert (seen["scheme"], seen["client"][0]) == ("http", "198.51.100.5")


def test_a_trusted_proxy_s_headers_give_the_client_and_the_scheme():
    proxied = scope(PROXY, (b"x-forwarded-proto", b"https"), (b"x-forwarded-for", b"203.0.113.7"))

    seen = forwarded_scope(proxied, PROXIES)

    assert (seen["scheme"], seen["client"][0]) == ("https", "203.0.113.7")


def test_the_client_is_the_nearest_address_that_is_not_a_trusted_proxy():
    # A client can prepend anything to X-Forwarded-For; only what the trusted hops appended counts.
    chain = scope(PROXY, (b"x-forwarded-for", b"127.0.0.1, 203.0.113.7, 10.9.9.4"))

    assert forwarded_scope(chain, PROXIES)["client"][0] == "203.0.113.7"


@pytest.mark.parametrize("value", [b"not-an-address", b"203.0.113.7:5555", b"", b", ,"])
def test_a_malformed_forwarded_for_leaves_the_proxy_as_the_client(value):
    seen = forwarded_scope(scope(PROXY, (b"x-forwarded-for", value)), PROXIES)

    assert seen["client"][0] == PROXY


def test_a_websocket_behind_a_tls_proxy_is_wss():
    seen = forwarded_scope(scope(PROXY, (b"x-forwarded-proto", b"https"), kind="websocket"), PROXIES)

    assert seen["scheme"] == "wss"


def test_an_ipv4_mapped_proxy_address_is_the_same_proxy():
    seen = forwarded_scope(scope(f"::ffff:{PROXY}", (b"x-forwarded-for", b"203.0.113.7")), PROXIES)

    assert seen["client"][0] == "203.0.113.7"


# --- through the application --------------------------------------------------------------------


@pytest.fixture
def redirecting_app(settings):
    """The ASGI application as a TLS-only deployment builds it (SecurityMiddleware reads the setting at start)."""
    settings.SIDEWISP_TRUSTED_PROXIES = PROXIES
    with override_settings(SECURE_SSL_REDIRECT=True):
        yield TrustedProxyHeaders(get_asgi_application())


def test_a_spoofed_https_header_from_the_internet_is_still_redirected_to_https(redirecting_app, db):
    spoofed = scope("198.51.100.5", (b"x-forwarded-proto", b"https"))

    response = get(redirecting_app, spoofed)

    assert response["status"] == 301
    assert dict((k.lower(), v) for k, v in response["headers"])[b"location"] == b"https://localhost/healthz"


@pytest.mark.django_db(transaction=True)
def test_the_named_proxy_s_https_header_is_believed(redirecting_app):
    response = get(redirecting_app, scope(PROXY, (b"x-forwarded-proto", b"https")))

    assert response["status"] != 301


@pytest.mark.django_db(transaction=True)
def test_a_spoofed_forwarded_for_does_not_pass_the_metrics_address_list(settings):
    from sidewisp.asgi import application

    settings.SIDEWISP_TRUSTED_PROXIES = PROXIES
    settings.SIDEWISP_METRICS_ALLOW = METRICS_ALLOW
    forwarded = (b"x-forwarded-for", b"127.0.0.1")

    spoofed = get(application, scope("198.51.100.5", forwarded, path="/metrics"))
    proxied = get(application, scope(PROXY, forwarded, path="/metrics"))

    assert (spoofed["status"], proxied["status"]) == (403, 200)


@pytest.mark.django_db(transaction=True)
def test_without_named_proxies_no_forwarded_header_is_believed(settings):
    from sidewisp.asgi import application

    settings.SIDEWISP_TRUSTED_PROXIES = ()
    settings.SIDEWISP_METRICS_ALLOW = METRICS_ALLOW

    response = get(application, scope(PROXY, (b"x-forwarded-for", b"127.0.0.1"), path="/metrics"))

    assert response["status"] == 403
