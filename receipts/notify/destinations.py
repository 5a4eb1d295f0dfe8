"""Where a webhook may be sent: public HTTP(S) addresses only, unless the operator allows networks.

An admin types a channel's URL, and the deliveries then tell whether it answered. Without these
rules that would let anyone with the admin reach the cloud metadata service, Redis, PostgreSQL or the
private network from the worker, and read the result back as a port scan. So:

- at save time a URL must be `http://` or `https://`, with a host and no `user:password@`; a host that is a
  literal address send time would refuse (`http://10.0.0.5/`, `http://[::1]/`, `http://2130706433/`) or
  `localhost` is saved with a warning saying so (`literal_address_warning`, issue 29 §7);
- at send time its host is resolved once and every address it resolves to must be public (not
  loopback, link-local, private, shared, multicast, reserved or unspecified, in its IPv4, IPv6,
  IPv4-mapped, 6to4 or NAT64 form), or inside a network the operator allows
  (`SIDEWISP_WEBHOOK_ALLOW_NETWORKS`); the connection goes to the address that was checked, so a
  second DNS answer cannot move it (no rebinding).

Plain Python, no Django import.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable
from urllib.parse import SplitResult, urlsplit

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

NOT_ALLOWED = "address not allowed"
SCHEMES = ("http", "https")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_IPV4_COMPATIBLE = ipaddress.ip_network("::/96")  # deprecated ::a.b.c.d, which some stacks still route as IPv4


class Refused(Exception):
    """The destination is not one a webhook may reach; the message is safe to show (no URL, no address)."""


def url_problem(url: str) -> str:
    """Why `url` cannot be a webhook's URL ("" when it can)."""
    try:
        parts = urlsplit(url.strip())
        parts.port  # noqa: B018 - raises ValueError on a port out of range
    except ValueError:
        return "is not a valid URL"
    if parts.scheme.lower() not in SCHEMES:
        return "must start with http:// or https://"
    if "@" in parts.netloc:
        return "must not carry a user name or password (user:password@)"
    if not parts.hostname:
        return "must name a host"
    return ""


def literal_address_warning(url: str, allowed: Iterable[Network] = ()) -> str:
    """When `url` names its host by an address that send time refuses (or as localhost): a warning that says so.

    "" for a host name (only resolving it at send time can tell) and for an allowed or public address.
    """
    try:
        host = (urlsplit(url.strip()).hostname or "").rstrip(".")
    except ValueError:
        return ""
    if host == "localhost" or host.endswith(".localhost"):
        address = "127.0.0.1"
    else:
        try:
            address = str(ipaddress.ip_address(host.split("%", 1)[0]))
        except ValueError:
            try:  # the forms the resolver reads as IPv4 too: 2130706433, 127.1, 0x7f.0.0.1
                address = socket.inet_ntoa(socket.inet_aton(host))
            except OSError:
                return ""
    if address_allowed(address, allowed):
        return ""
    return (
        "The URL names an internal address (loopback, private, link-local or another one that is not public): "
        "it was saved, but every delivery to it will be refused when it is sent, unless "
        "SIDEWISP_WEBHOOK_ALLOW_NETWORKS allows that network."
    )


def target(url: str) -> SplitResult:
    """The parts of a URL `url_problem` accepts; Refused naming why otherwise (a row saved before the rule)."""
    if problem := url_problem(url):
        raise Refused(f"URL {problem}")
    return urlsplit(url.strip())


def resolve(host: str, port: int, allowed: Iterable[Network] = ()) -> list[str]:
    """The addresses `host` resolves to (one lookup), each checked; Refused(NOT_ALLOWED) when any is not public
    and outside `allowed`, socket.gaierror when the host does not resolve."""
    allowed = tuple(allowed)
    found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    addresses = list(dict.fromkeys(info[4][0] for info in found))
    if not addresses or not all(address_allowed(address, allowed) for address in addresses):
        raise Refused(NOT_ALLOWED)
    return addresses


def address_allowed(text: str, allowed: Iterable[Network] = ()) -> bool:
    """True for a public unicast address, or one inside a network of `allowed` (in any of its spellings)."""
    try:
        address = ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        return False
    forms = _forms(address)
    if any(form in network for form in forms for network in allowed if form.version == network.version):
        return True
    return all(_public(form) for form in forms)


def _forms(address: Address) -> list[Address]:
    """The address and every IPv4 address it embeds (mapped, 6to4, NAT64): each must pass."""
    forms: list[Address] = [address]
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            forms.append(address.ipv4_mapped)
        if address.sixtofour is not None:
            forms.append(address.sixtofour)
        if address in _NAT64 or address in _IPV4_COMPATIBLE:
            forms.append(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
    return forms


def _public(address: Address) -> bool:
    # is_global is False for loopback, link-local, private, shared (100.64/10), unspecified and documentation
    # ranges; multicast and some reserved ranges are "global" to ipaddress but never a webhook.
    special = (
        address.is_loopback,
        address.is_link_local,
        address.is_private,
        address.is_multicast,
        address.is_reserved,
        address.is_unspecified,
    )
    return address.is_global and not any(special)
