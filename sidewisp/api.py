"""The receipts API for agents that run elsewhere: plain JSON views authenticated by source tokens.

`POST /api/v1/receipts` stores a body of entries or bundles (receipts.workers.sources),
`GET /api/v1/decisions/<operation_id>` offers the run's oldest unclaimed
operator decision and `POST .../claim` claims it once. A token (`Authorization:
Bearer ...`, made in the admin) is the only credential: no session, so no CSRF.
Every refusal is a JSON error naming the field, `{"error": {"field", "message"}}`,
and nothing is stored then.
"""

from __future__ import annotations

import contextlib
import json
import math
import time
from collections.abc import Callable
from dataclasses import asdict
from functools import wraps

import redis
from django.conf import settings
from django.core.cache import cache
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST
from redis.exceptions import RedisError

from agents.observe.database import remembered_interrupts
from receipts.models import Decision, Run, SourceToken
from receipts.verdicts import bundle
from receipts.workers import claims, sources
from sidewisp.ops import metrics


def _error(status: int, field: str, message: str, **headers: str) -> JsonResponse:
    response = JsonResponse({"error": {"field": field, "message": message}}, status=status)
    for name, value in headers.items():
        response[name.replace("_", "-")] = value
    return response


def token_required(view: Callable) -> Callable:
    """401 without an active source token, 429 past the token's rate limit; the view gets the token."""

    @csrf_exempt
    @wraps(view)
    def wrapper(request: HttpRequest, *args, **kwargs) -> JsonResponse:
        scheme, _, raw = request.headers.get("Authorization", "").partition(" ")
        token = sources.authenticate(raw.strip()) if scheme.lower() == "bearer" else None
        if token is None:
            message = "needs an active source token: Bearer <token>"
            return _error(401, "Authorization", message, WWW_Authenticate='Bearer realm="sidewisp"')
        try:
            wait = _rate_limited(token)
        except RedisError:
            return _error(503, "rate_limit", "the rate limiter is unreachable; try again", Retry_After="5")
        if wait:
            return _error(429, "rate_limit", "too many requests for this token", Retry_After=str(wait))
        sources.note_use(token)
        return view(request, token, *args, **kwargs)

    return wrapper


def _rate_limited(token: SourceToken) -> int:
    """Seconds until the token may call again (a fixed window per token), 0 when it may now."""
    window, now = settings.SIDEWISP_API_RATE_WINDOW, time.time()
    key = f"api-rate:{token.key_id}:{int(now // window)}"
    cache.add(key, 0, timeout=window + 1)
    if cache.incr(key) <= settings.SIDEWISP_API_RATE_LIMIT:
        return 0
    return math.ceil(window - now % window)


def _json_body(request: HttpRequest) -> object:
    """The decoded JSON body, or a JsonResponse refusing it (415, 413, 400)."""
    if request.content_type != "application/json":
        return _error(415, "Content-Type", "must be application/json")
    cap = settings.SIDEWISP_API_MAX_BODY_BYTES
    declared = request.META.get("CONTENT_LENGTH") or "0"
    if not declared.isdigit() or int(declared) > cap or len(request.body) > cap:
        return _error(413, "body", f"must be at most {cap} bytes")
    try:
        return json.loads(request.body.decode("utf-8"), parse_constant=_no_constant)
    except UnicodeDecodeError:
        return _error(400, "body", "must be UTF-8")
    except (ValueError, RecursionError):
        return _error(400, "body", "is not valid JSON (or nests too deeply)")


def _no_constant(name: str) -> object:
    msg = f"{name} is not JSON"
    raise ValueError(msg)


@require_POST
@token_required
def post_receipts(request: HttpRequest, token: SourceToken) -> JsonResponse:
    body = _json_body(request)
    if isinstance(body, JsonResponse):
        return body
    try:
        stored = sources.store(token, sources.entries_from(body))
    except bundle.BundleError as exc:
        _count_refused()
        return _error(400, exc.field, exc.message)
    except sources.OutOfScope as exc:
        _count_refused()
        return _error(403, exc.field, exc.message)
    return JsonResponse({"entries": [{"stored": flag} for flag in stored]})


def _count_refused() -> None:
    """Count a refused body for /metrics (spec v1.3: nothing dropped in silence); never fails the answer."""
    client = redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=0.2, socket_timeout=0.2)
    with contextlib.suppress(redis.RedisError), client:
        client.incr(metrics.refused_receipts_key())


@require_GET
@token_required
def get_decision(request: HttpRequest, token: SourceToken, operation_id: str) -> JsonResponse:
    run = _run(token, operation_id)
    if isinstance(run, JsonResponse):
        return run
    offered = claims.unclaimed(run).exclude(kind=Decision.Kind.REOPEN).first()  # a reopen is local only
    decision = None if offered is None else _offer(offered, run)
    return JsonResponse({"operation_id": run.operation_id, "decision": decision})


@require_POST
@token_required
def claim_decision(request: HttpRequest, token: SourceToken, operation_id: str) -> JsonResponse:
    run = _run(token, operation_id)
    if isinstance(run, JsonResponse):
        return run
    body = _json_body(request)
    if isinstance(body, JsonResponse):
        return body
    decision_id = body.get("decision") if isinstance(body, dict) else None
    if type(decision_id) is not int:
        return _error(400, "decision", "must be the id of a decision (a whole number)")
    found = (
        Decision.objects.select_related("handoff", "run")
        .filter(run=run, pk=decision_id)
        .exclude(kind=Decision.Kind.REOPEN)
        .first()
    )
    if found is None:
        return _error(404, "decision", "is not a decision on this run")
    if not sources.claim(token, found):
        return _error(409, "decision", "was claimed already")
    return JsonResponse({"decision": {**_offer(found, run), "resume": found.as_resume()}})


def _run(token: SourceToken, operation_id: str) -> Run | JsonResponse:
    try:
        # Spec v1.3: a credential-shaped id was stored redacted; the same value finds the same run.
        run = sources.run_in_scope(token, bundle.identifier(operation_id))
    except sources.OutOfScope as exc:
        return _error(403, exc.field, exc.message)
    if run is None:
        return _error(404, "operation_id", "names no run")
    return run


def _offer(decision: Decision, run: Run) -> dict:
    # The interrupts as Sidewisp remembers them: tool names, never argument values.
    interrupts = [asdict(item) for item in remembered_interrupts(run)]
    return {
        "id": decision.pk,
        "type": decision.kind,
        "decided_at": bundle.format_time(decision.decided_at),
        "interrupts": interrupts,
    }
