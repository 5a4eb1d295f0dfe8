"""Field values of the interchange format: the one rule for stored text, names, times and report details.

Plain Python with no Django import, like the rest of the agent package (the server reads it as
receipts.verdicts.fields). Errors are a `BundleError` naming
the field, never repeating the value.
"""

from __future__ import annotations

import functools
import hashlib
import math
import re
import unicodedata
from collections import Counter
from collections.abc import Callable, Mapping
from datetime import UTC, datetime

MAX_STRING_LENGTH = 200
MAX_LIST_ENTRIES = 100

# Cc covers ASCII/C1 controls and newlines; Zl/Zp are Unicode line breaks; Cf
# holds invisible bidi overrides that would make an id display as another id;
# Cs (lone surrogates) cannot be stored as UTF-8.
_CONTROL_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
# An absolute local path anywhere in the text: a slash or backslash that does not
# continue a relative name (`routes/1`, `./x` pass; `/etc`, `see /srv/a`, `x=/var`,
# `\\server` and `https://` fail), a home directory (`~/`, `~root`, `$HOME`), a
# drive letter and a `file:` URL.
_ABSOLUTE_PATH = re.compile(r"(?<![\w.])[/\\~]|[A-Za-z]:[/\\]|\bfile:|\$\{?HOME\b", re.IGNORECASE)
# Known credential shapes, the one test an identifier is held to (spec v1.3 "Identifiers are not secrets"):
# provider key prefixes, JSON web tokens, PEM blocks, bearer tokens and `password=`-style assignments.
# Never length, hex or randomness: a git SHA, a dashless UUID and `user42_Session2024_10_05_CheckoutFlow`
# are identifiers.
_CREDENTIAL = re.compile(
    r"(?<![A-Za-z0-9])(?:sk|rk)[-_](?:live|test|proj|ant|svcacct|admin)[-_][A-Za-z0-9_-]{6,}"  # Stripe, OpenAI, Claude
    r"|(?<![A-Za-z0-9])sk-[A-Za-z0-9]{20,}(?![A-Za-z0-9_-])"  # OpenAI's older keys: sk- and one long run
    r"|\b(?:gh[pousr]_|github_pat_)[A-Za-z0-9_]{20,}"  # GitHub tokens
    r"|(?<![A-Za-z0-9])AKIA[A-Z0-9]{16}|(?<![A-Za-z0-9])ASIA[A-Z2-7]{16}(?![A-Za-z0-9])"  # AWS access key ids
    r"|\bxox[abposr]-[A-Za-z0-9-]{8,}|\bxapp-[A-Za-z0-9-]{8,}"  # Slack
    r"|\bAIza[A-Za-z0-9_-]{30,}"  # Google API keys
    r"|\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{4,}"  # JSON web tokens: base64 of `{"`, then a second segment
    r"|\bswt_[0-9a-f]{12}_[A-Za-z0-9_-]{43}"  # Sidewisp's own source tokens
    r"|-----BEGIN"  # PEM blocks
    r"|(?i:\bbearer\s+\S)"
    r"|(?i:\b(?:password|passwd|secret|client_secret|api[_-]?key|access[_-]?key)\s*[=:]\s*\S)"  # assignments
)
# Free text (not an identifier) is held to more: the credential shapes above in their looser forms, and
# `password=`-style assignments. Long random runs are judged by _has_random_run.
_SECRET = re.compile(
    r"(?<![A-Za-z0-9])(?:sk|rk)[-_][A-Za-z0-9_-]{8,}"  # OpenAI, Anthropic, Stripe secret and restricted keys
    r"|\b(?:gh[pousr]_|github_pat_)[A-Za-z0-9_]{8,}"  # GitHub tokens
    r"|(?<![A-Z0-9])(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA)[A-Z0-9]{12,}"  # AWS access key ids
    r"|\bxox[a-z]-[A-Za-z0-9-]+|\bxapp-[A-Za-z0-9-]+"  # Slack
    r"|\bAIza[A-Za-z0-9_-]{20,}"  # Google API keys
    r"|\beyJ[A-Za-z0-9_-]{10,}"  # JSON web tokens (base64 of `{"`)
    r"|-----BEGIN"  # PEM blocks
    r"|(?i:\bbearer\s+\S)"
    r"|(?i:\b(?:password|passwd|pwd|secret|client_secret|api[_-]?key|access[_-]?key|token|access[_-]?token)\s*[=:])"
)
# What a refused identifier is stored as: the prefix and the first 12 hex digits of the value's SHA-256.
REDACTED_PREFIX = "redacted:"
_REDACTED = re.compile(r"redacted:[0-9a-f]{12}")
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.IGNORECASE)
_TOKEN_RUN = re.compile(r"[A-Za-z0-9+/_=-]{32,}")
_HEX_RUN = re.compile(r"[0-9a-fA-F]{40,}")
# Shannon entropy in bits per character: random base62 runs of 32 characters
# score about 4.5 (rarely under 4.2), identifiers and English words under 4.
_RANDOM_RUN_BITS = 4.2

# Extended ISO 8601 with a mandatory zone. fromisoformat alone would also take
# any separator character and naive times.
_ISO_TIME = re.compile(
    r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d{1,9})?)?(?:Z|[+-]\d{2}(?::?\d{2})?)",
    re.ASCII,
)
_TIME_PROBLEM = "must be an ISO 8601 time with a time zone"


class BundleError(ValueError):
    """Input that is not a valid bundle, part or contracts document.

    `field` is a dotted path such as ``reduced.context_keys[2]``; `message`
    says what is wrong without repeating the rejected value.
    """

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@functools.lru_cache(maxsize=4096)  # a batch checks the same names and ids again and again
def identifier_problem(text: str) -> str | None:
    """Why `text` may not be stored as an identifier or a name, or None when it may (spec v1.3).

    An id or a name (operation, handoff, tool-call, attempt and resume-token ids, thread ids, node, agent,
    tool and route-version names) is refused only for what makes it unsafe anywhere: more than
    MAX_STRING_LENGTH characters, control or bidi characters, an absolute local path, or a known credential
    shape (`_CREDENTIAL`). Never for being long, hex or random-looking. The answer never repeats the text.
    """
    if len(text) > MAX_STRING_LENGTH:
        return f"is longer than {MAX_STRING_LENGTH} characters"
    folded = text if text.isascii() and text.isprintable() else _folded(text)  # most ids: checked per receipt
    if folded is None:
        return "must not contain control characters"
    if _ABSOLUTE_PATH.search(folded):
        return "must not contain an absolute local path"
    if _CREDENTIAL.search(folded):
        return "must not contain a credential"
    return None


def _folded(text: str) -> str | None:
    """`text` in its compatibility form (NFKC), None when it holds a control or bidi character.

    Printable ASCII holds neither and is its own compatibility form: `identifier_problem` skips this for it.
    """
    if any(unicodedata.category(char) in _CONTROL_CATEGORIES for char in text):
        return None
    # Compatibility forms (a fullwidth solidus, ligatures) read like their ASCII twins on a page.
    return unicodedata.normalize("NFKC", text)


def text_problem(text: str) -> str | None:
    """Why free text may not be stored, shown or announced, or None when it may.

    Free text that is not an identifier (a notification's words, an audit entry's names typed by people) is
    held to `identifier_problem` and more: nothing shaped like a secret, which includes `password=`-style
    assignments, long hex runs and long runs that mix cases and digits at random. Names, ids, ISO times and
    short digests (`call_abc123`, `h-7f3a09c1d2e4b5a6`, `routes/1`, a UUID) pass. The answer never repeats
    the text.
    """
    if problem := identifier_problem(text):
        return "must not contain a secret-shaped value" if problem == "must not contain a credential" else problem
    folded = unicodedata.normalize("NFKC", text)
    if _SECRET.search(folded) or _has_random_run(folded):
        return "must not contain a secret-shaped value"
    return None


def redacted(text: str) -> str:
    """What a refused identifier is stored as: the same value gives the same replacement everywhere."""
    return REDACTED_PREFIX + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:12]


def is_redacted(value: object) -> bool:
    """`value` is a replacement made by `redacted` (here or by the agent side before it sent it)."""
    # Its prefix first: nearly every id is asked, and nearly none is one.
    return isinstance(value, str) and value.startswith(REDACTED_PREFIX) and _REDACTED.fullmatch(value) is not None


def redacted_fields(value: object, field: str) -> list[str]:
    """Where in `value` (a stored part, a report's detail: names and lists of names) a `redacted` value is,
    as field paths under `field` (`created.receiver`, `reduced.tool_message_ids[2]`)."""
    # Nearly every value holds none: asked first, without the paths (the receiver records one per receipt).
    return _redacted_paths(value, field) if _may_hold_redacted_within(value) else []


def _may_hold_redacted_within(value: object) -> bool:
    """Whether a string that starts like a `redacted` value is anywhere in `value` (a superset: the paths tell)."""
    if isinstance(value, str):
        return value.startswith(REDACTED_PREFIX)
    if isinstance(value, dict | Mapping):
        value = value.values()
    elif not isinstance(value, list | tuple):
        return False
    for item in value:
        if type(item) is str:
            if item.startswith(REDACTED_PREFIX):
                return True
        elif item is not None and type(item) not in _SCALARS and _may_hold_redacted_within(item):
            return True
    return False


_SCALARS = frozenset({bool, int, float})


def _redacted_paths(value: object, field: str) -> list[str]:
    if is_redacted(value):
        return [field]
    # Only what may hold one is walked into (a field path is built per item walked: a part has dozens).
    if isinstance(value, Mapping):
        items = ((f"{field}.{key}", item) for key, item in value.items() if _may_hold_redacted(item))
    elif isinstance(value, list | tuple):
        items = ((f"{field}[{index}]", item) for index, item in enumerate(value) if _may_hold_redacted(item))
    else:
        return []
    return [found for where, item in items for found in _redacted_paths(item, where)]


def _may_hold_redacted(value: object) -> bool:
    if isinstance(value, str):
        return value.startswith(REDACTED_PREFIX)
    return isinstance(value, Mapping | list | tuple)


def identifier(text: str) -> str:
    """`text` when it may be stored as an identifier, else its `redacted` replacement."""
    return text if identifier_problem(text) is None else redacted(text)


def _has_random_run(text: str) -> bool:
    """A long hex run, or a long run mixing upper case, lower case and digits at random."""
    if _HEX_RUN.search(text):
        return True
    for run in _TOKEN_RUN.findall(_UUID.sub(" ", text)):
        mixed = any(c.isupper() for c in run) and any(c.islower() for c in run) and any(c.isdigit() for c in run)
        if mixed and _bits_per_char(run) >= _RANDOM_RUN_BITS:
            return True
    return False


def _bits_per_char(run: str) -> float:
    counts = Counter(run)
    return -sum(n / len(run) * math.log2(n / len(run)) for n in counts.values())


def parse_text(value: object, field: str) -> str | None:
    """A name held to `identifier_problem` and refused when it fails (contracts, forms: a person fixes it)."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise BundleError(field, "must be a string")
    if problem := identifier_problem(value):
        raise BundleError(field, problem)
    return value


def parse_required_text(value: object, field: str) -> str:
    if value is None:
        raise BundleError(field, "is required")
    text = parse_text(value, field)
    if not text:
        raise BundleError(field, "must not be empty")
    return text


def parse_identifier(value: object, field: str) -> str | None:
    """An id or a name of evidence: a string, kept as it is or `redacted` when `identifier_problem` refuses it.

    A refused value never takes its entry down (spec v1.3); only a value that is not a string is an error.
    """
    if value is None:
        return None
    if not isinstance(value, str):
        raise BundleError(field, "must be a string")
    return identifier(value)


def parse_required_identifier(value: object, field: str) -> str:
    if value is None:
        raise BundleError(field, "is required")
    text = parse_identifier(value, field)
    if not text:
        raise BundleError(field, "must not be empty")
    return text


def parse_names(value: object, field: str, item: Callable[[object, str], str | None] = parse_text) -> tuple[str, ...]:
    """A list of at most MAX_LIST_ENTRIES strings, each read by `item` (refused names by default)."""
    if value is None:
        return ()
    if not isinstance(value, list | tuple):
        raise BundleError(field, "must be a list of strings")
    if len(value) > MAX_LIST_ENTRIES:
        raise BundleError(field, f"has more than {MAX_LIST_ENTRIES} entries")
    names = []
    for index, entry in enumerate(value):
        if entry is None:
            raise BundleError(f"{field}[{index}]", "must be a string")
        names.append(item(entry, f"{field}[{index}]"))
    return tuple(names)


def parse_identifiers(value: object, field: str) -> tuple[str, ...]:
    """A list of ids or names of evidence, each kept or `redacted` (`parse_identifier`)."""
    if type(value) is list and len(value) <= MAX_LIST_ENTRIES and all(type(entry) is str for entry in value):
        return tuple(map(identifier, value))  # what `parse_names` gives them, without naming each entry's field
    return parse_names(value, field, parse_identifier)


def parse_optional_identifiers(value: object, field: str) -> tuple[str, ...] | None:
    return None if value is None else parse_identifiers(value, field)


def _to_utc(text: str) -> datetime | None:
    if not _ISO_TIME.fullmatch(text):
        return None
    try:
        return datetime.fromisoformat(text).astimezone(UTC)
    except (ValueError, OverflowError):  # e.g. month 13, or a shift past year 1 or 9999
        return None


def parse_time(field: str, value: object) -> datetime:
    """An ISO 8601 time with a zone, as an aware UTC datetime; BundleError otherwise."""
    if not isinstance(value, str) or len(value) > MAX_STRING_LENGTH:
        raise BundleError(field, _TIME_PROBLEM)
    # Raised outside any `except` so no chained exception carries the raw text into logs.
    moment = _to_utc(value)
    if moment is None:
        raise BundleError(field, _TIME_PROBLEM)
    return moment


def parse_optional_names(value: object, field: str) -> tuple[str, ...] | None:
    return None if value is None else parse_names(value, field)


def parse_optional_time(value: object, field: str) -> datetime | None:
    return None if value is None else parse_time(field, value)


def parse_bool(value: object, field: str) -> bool | None:
    if value is None or type(value) is bool:
        return value
    raise BundleError(field, "must be true or false")


def format_time(moment: datetime) -> str:
    """ISO 8601 in UTC with a trailing Z, e.g. ``2026-07-30T10:00:00Z``."""
    # A parsed time is in UTC already (`_to_utc`): converted only when it is not. In UTC, isoformat ends in
    # +00:00 and nowhere else.
    utc = moment if moment.tzinfo is UTC else moment.astimezone(UTC)
    return utc.isoformat()[:-6] + "Z"


# --- middleware reports and other minimized strings --------------------------

MAX_DETAIL_ENTRIES = 20


def parse_name(value: object, field: str) -> str:
    """A required, non-empty name that passes `identifier_problem` (refused, not redacted: a person or a
    configuration chose it and can fix it); BundleError naming `field` otherwise."""
    return parse_required_text(value, field)


def parse_report_detail(value: object, field: str = "detail") -> dict[str, object]:
    """A middleware report's detail: names, codes and counts only.

    Contract: an object of at most MAX_DETAIL_ENTRIES entries whose keys are
    names and whose values are strings, whole or finite numbers, booleans,
    null, or lists of those (at most MAX_LIST_ENTRIES). A string value is a
    name (a node, a tool, an error class, a field): kept, or `redacted` when
    `identifier_problem` refuses it. Anything else raises `BundleError` naming
    the key, and a key that cannot be named safely is reported as `field` alone.
    """
    if not isinstance(value, Mapping):
        raise BundleError(field, "must be an object")
    if len(value) > MAX_DETAIL_ENTRIES:
        raise BundleError(field, f"has more than {MAX_DETAIL_ENTRIES} entries")
    detail: dict[str, object] = {}
    for key, item in value.items():
        name = parse_name_key(key, field, "key")
        if isinstance(item, list | tuple):
            if len(item) > MAX_LIST_ENTRIES:
                raise BundleError(f"{field}.{name}", f"has more than {MAX_LIST_ENTRIES} entries")
            detail[name] = [_parse_scalar(entry, f"{field}.{name}[{index}]") for index, entry in enumerate(item)]
        else:
            detail[name] = _parse_scalar(item, f"{field}.{name}")
    return detail


def _parse_scalar(value: object, field: str) -> object:
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, float) and math.isfinite(value):
        return value
    if isinstance(value, str):
        return parse_identifier(value, field)
    raise BundleError(field, "must be a name, a number, true, false or null")


def parse_name_key(key: object, field: str, what: str) -> str:
    """A mapping key that names a version, sender or receiver.

    The key itself becomes part of later error paths, so it is checked before
    it is ever echoed.
    """
    if not isinstance(key, str):
        raise BundleError(field, f"has a {what} name that is not a string")
    if not key:
        raise BundleError(field, f"has an empty {what} name")
    if problem := identifier_problem(key):
        raise BundleError(field, f"has a {what} name that {problem}")
    return key
