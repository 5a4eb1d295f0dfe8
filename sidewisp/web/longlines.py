"""A request line longer than daphne reads is answered 414, not dropped (issue 29 §2).

daphne reads HTTP with Twisted, whose line reader stops at 16 KB (`HTTPChannel.MAX_LENGTH`): a longer request
line (a 30 KB query string) was a closed connection with no answer at all, before Django saw anything. Under
daphne, `answer_long_lines()` (called by `sidewisp.asgi`) makes that a `414 URI Too Long` with a sentence, and a
header line past the limit a `431 Request Header Fields Too Long`; the connection is closed after either. A
query string that does fit is bounded by `sidewisp.web.refusals.QueryStringMiddleware` (12 KB: 414 in words).

Nothing happens under another server (Twisted not loaded): it has its own limits.
"""

from __future__ import annotations

import sys

TOO_LONG = {
    True: (b"414 URI Too Long", b"The address is too long: the request line is over 16 KB.\n"),
    False: (b"431 Request Header Fields Too Long", b"A request header is too long: over 16 KB.\n"),
}


def answer_long_lines() -> bool:
    """Make daphne's HTTP channel answer a line past its limit; whether it did (daphne is serving)."""
    http = sys.modules.get("twisted.web.http")
    if http is None or getattr(http.HTTPChannel.lineLengthExceeded, "sidewisp", False):
        return http is not None
    http.HTTPChannel.lineLengthExceeded = _line_length_exceeded
    return True


def _line_length_exceeded(self, line: bytes) -> None:
    # Twisted keeps `__first_line` true until the request line of the request being read has been taken.
    first = bool(getattr(self, "_HTTPChannel__first_line", True))
    status, body = TOO_LONG[first]
    head = b"HTTP/1.1 %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\n\r\n"
    self.transport.write(head % (status, len(body)) + body)
    self.transport.loseConnection()


_line_length_exceeded.sidewisp = True
