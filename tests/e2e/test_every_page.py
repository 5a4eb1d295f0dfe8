"""Every page a person can reach, found from the URLconf, at 1366 px and at 390 px (real Chromium).

On each: axe-core finds no WCAG 2 A/AA violation, and at 390 px the page does not scroll sideways. The walk
is derived from the URL patterns (sidewisp.urls, with the admin's), their parameters filled from the seeded
data; a pattern that is neither walked nor named in NOT_WALKED (with why) fails the test, so a page added
later cannot be left out silently. Each page is opened by the admin role (staff, the account the product
hands its admins); an admin page that role is refused is opened again as a superuser, who can reach it.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import fields

import pytest

from tests.conftest import handoff_parts
from tests.e2e.conftest import PHONE, Seeded, axe_violations
from tests.e2e.test_live_pages import PASSWORD, expect, in_db_thread, record_parts, wait_snapshot

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.django_db(transaction=True),
]

WIDTHS = {"1366 px": {"width": 1366, "height": 900}, "390 px": PHONE}

# URL patterns (by name, or by route when unnamed) that are not walked, each with why.
NOT_WALKED = {
    # The overview's historical name (LOGIN_REDIRECT_URL): the same path and view as sidewisp:overview.
    "dashboard": "the same page as sidewisp:overview, which is walked",
    # Actions: POST only (a GET answers 405). Their forms are on the confirm pages, which are walked, and
    # their answer is the result page, walked as sidewisp:wait-decided.
    "sidewisp:run-create": "POST only: the form is on runs/start/",
    "sidewisp:waits-batch-decide": "POST only: the form is on waits/batch/",
    "sidewisp:wait-decide": "POST only: the form is on the approve, reject and edit confirm pages",
    "sidewisp:wait-reassign": "POST only: the form is on the reassign confirm page",
    "sidewisp:wait-cancel": "POST only: the form is on the cancel confirm page",
    "sidewisp:task-reopen": "POST only: the form is on the reopen confirm page",
    "sidewisp:task-verify": "POST only: the form is on the verify confirm page",
    "sidewisp:task-accept": "POST only: the form is on the accept confirm page",
    "sidewisp:task-resolve": "POST only: the form is on the resolve confirm page",
    "sidewisp:run-stop": "POST only: the form is on the stop confirm page",
    "sidewisp:run-resume": "POST only: the form is on the resume confirm page",
    "sidewisp:run-retry": "POST only: the form is on the retry confirm page",
    "sidewisp:run-declare": "POST only: its form is on the run page of a run with a rejected route (walked)",
    "logout": "POST only: it signs out and redirects to the login page",
    # Not pages: downloads and machine answers.
    "sidewisp:audit-csv": "a CSV download",
    "healthz": "the load balancer's plain-text probe",
    "metrics": "Prometheus' text format",
    "api:receipts": "the receipts API: JSON for source tokens, no session",
    "api:decision-claim": "the receipts API: JSON for source tokens, no session",
    "api:decision": "the receipts API: JSON for source tokens, no session",
    "admin:receipts_contractversion_export": "a contract version's JSON download",
    "admin:jsi18n": "the admin's JavaScript catalogue",
    "admin:autocomplete": "JSON for the admin's autocomplete widgets",
    "admin:view_on_site": "a redirect to the object's own page",
    "admin:logout": "POST only: it signs out",
    "admin/<app>/<model>/<path:object_id>/": "a redirect to the object's change page (walked)",
    "admin/(?P<url>.*)$": "the admin's catch-all: a redirect or a 404",
    # Pages no test can reach without an identity provider.
    "sso-login": "a 404 unless single sign-on is configured; then a redirect to the identity provider",
    "sso-callback": "the identity provider's redirect back, which needs its signed state",
}


def url_patterns() -> dict[str, str]:
    """Every URL pattern as {name (namespace:name), or its route when unnamed: route}."""
    from django.urls import URLResolver, get_resolver

    found: dict[str, str] = {}

    def walk(patterns, prefix: str, namespace: str) -> None:
        for pattern in patterns:
            route = prefix + str(pattern.pattern)
            if isinstance(pattern, URLResolver):
                inner = f"{namespace}{pattern.namespace}:" if pattern.namespace else namespace
                walk(pattern.url_patterns, route, inner)
            else:
                found[f"{namespace}{pattern.name}" if pattern.name else route] = route

    walk(get_resolver().url_patterns, "", "")
    return found


def _admin_key(name: str) -> str:
    """An unnamed admin object route stands for one rule: admin/<app>/<model>/<path:object_id>/."""
    parts = name.split("/")
    if name.startswith("admin/") and len(parts) == 5 and parts[3] == "<path:object_id>":
        return "admin/<app>/<model>/<path:object_id>/"
    return name


# --- the data the pages show -------------------------------------------------------


def seed_more() -> dict:
    """Beyond seed_pages: one object of each admin model (for its change page) and a superuser."""
    from axes.models import AccessAttempt, AccessFailureLog, AccessLog
    from django.contrib import admin
    from django.contrib.auth import get_user_model

    from agents.models import LimitsVersion
    from receipts.models import (
        AlertRule,
        Delivery,
        Handoff,
        MiddlewareReport,
        NotificationChannel,
        RetentionPolicy,
        Run,
        SourceToken,
        Team,
        WaitReason,
    )
    from receipts.org.identities import SsoIdentity

    admin_user = get_user_model().objects.get(username="admin")
    admin_user.is_staff = True
    admin_user.save(update_fields=["is_staff"])
    get_user_model().objects.create_superuser(username="root", password=PASSWORD)

    channel = NotificationChannel.objects.create(
        name="ops", kind=NotificationChannel.Kind.WEBHOOK, url="http://127.0.0.1:9/hook", secret="s3cret-for-tests"
    )
    AlertRule.objects.create(name="false completions", kind="verdict", verdict="FALSE_COMPLETE", channel=channel)
    Delivery.objects.create(channel=channel, event="wait.opened", key="d-every-page", payload={}, status="sent")
    team = Team.objects.create(slug="alpha", name="Alpha")
    team.graphs.create(graph="shared")
    WaitReason.objects.get_or_create(code="site_visit")
    RetentionPolicy.current().save()
    LimitsVersion.current()
    SsoIdentity.objects.create(user=admin_user, issuer="https://idp.example", subject="admin-1")
    run = Run.objects.order_by("pk").first()
    MiddlewareReport.objects.create(run=run, agent="triage", kind="tool_error", attempt="1")
    token = SourceToken(source_name="remote-app", note="the billing team's app")
    token.key_id, token.digest = "every-page-key", "0" * 64
    token.save()
    # A refused sign-in from elsewhere, as django-axes records it (it locks nobody the test signs in as).
    seen = {"user_agent": "Chromium", "ip_address": "192.0.2.9", "username": "nobody", "http_accept": "text/html"}
    AccessAttempt.objects.create(**seen, path_info="/login/", get_data="", post_data="", failures_since_start=1)
    AccessFailureLog.objects.create(**seen, path_info="/login/")
    AccessLog.objects.create(**seen, path_info="/login/")

    firsts, access = {}, {}
    people = {"admin": admin_user, "root": get_user_model().objects.get(username="root")}
    for model, model_admin in admin.site._registry.items():
        first = model._default_manager.order_by("pk").first()
        firsts[model._meta.label_lower] = first.pk if first is not None else None
        for view, allowed in _admin_views(model_admin, first).items():
            # The least privileged who may open it: the admin role, else a superuser, else nobody.
            name = f"admin:{model._meta.app_label}_{model._meta.model_name}_{view}"
            access[name] = next((who for who, user in people.items() if allowed(_request_of(user))), None)
    for app in {model._meta.app_label for model in admin.site._registry}:
        shown = [m for model, m in admin.site._registry.items() if model._meta.app_label == app]
        access[f"app:{app}"] = next(
            who for who, user in people.items() if any(m.has_module_permission(_request_of(user)) for m in shown)
        )
    waits = list(
        Handoff.objects.filter(handoff_id__startswith="h-phone-wait-").order_by("pk").values_list("pk", flat=True)
    )
    runs = list(Run.objects.order_by("pk").values_list("pk", flat=True))
    return {"firsts": firsts, "access": access, "waits": waits, "runs": runs}


def _request_of(user):
    from django.test import RequestFactory

    request = RequestFactory().get("/admin/")
    request.user = user
    return request


def _admin_views(model_admin, obj) -> dict:
    """Each page of a model's admin with the check Django's admin makes before it opens it."""
    return {
        "changelist": model_admin.has_view_or_change_permission,
        "add": model_admin.has_add_permission,
        "change": lambda request: obj is not None and model_admin.has_view_or_change_permission(request, obj),
        "history": lambda request: obj is not None and model_admin.has_view_or_change_permission(request, obj),
        "delete": lambda request: obj is not None and model_admin.has_delete_permission(request, obj),
    }


def _rejected_route_run() -> int:
    """A run whose handoff used a route the contract lacks: its page offers the admin the declare form."""
    from receipts.models import Run

    parts = handoff_parts("healthy", sender="alice", receiver="bob")
    parts[0] = ("created", {**parts[0][1], "route_version": "teams/9", "route_version_source": "middleware"})
    record_parts("h-every-declare", "op-every-declare", parts)
    return in_db_thread(lambda: Run.objects.get(operation_id="op-every-declare").pk)


# Django's stock history and delete-confirmation pages are one template each, the same for every model: walked
# on one model (the alert rules, which the admin role may delete), not on each.
STOCK_ONCE = {"history": "receipts_alertrule", "delete": "receipts_alertrule"}


def plan(seeded, more: dict) -> dict[str, list[tuple[str, str]]]:
    """{URL pattern: the (path, who opens it) walked for it}, parameters filled from the seeded data.

    An admin page is opened by the admin role when Django's admin lets it, else by a superuser; a page the
    admin refuses to everyone (adding a receipt, deleting a contract version) is no page, and not walked.
    """
    from django.contrib import admin

    from sidewisp.pages.confirm import ACTION_URLS

    # Each confirm page on the object its action acts on: a wait, a false-complete handoff, or a run.
    targets = {"wait": seeded.wait, "task": seeded.false, "run": seeded.stale_run}
    batch = "&".join(f"wait={pk}" for pk in more["waits"])
    limits = more["firsts"]["agents.limitsversion"]
    pages = {
        "sidewisp:overview": ["/"],
        "sidewisp:runs": ["/runs/", "/runs/?verdict=FALSE_COMPLETE&q=op-phone", "/runs/?page=2"],
        "sidewisp:run-detail": [f"/runs/{pk}/" for pk in more["runs"]],
        "sidewisp:run-history": [f"/runs/{seeded.wait_run}/history/"],
        "sidewisp:run-start": ["/runs/start/"],
        "sidewisp:waits": ["/waits/", "/waits/?mine=1"],
        "sidewisp:false-completions": ["/false-completions/"],
        "sidewisp:system": ["/system/"],
        "sidewisp:map": ["/map/", "/map/?window=7d&graph=nosuch"],
        "sidewisp:confirm": [
            f"/confirm/{what}/{targets[name.split(':')[1].split('-')[0]]}/" for what, name in ACTION_URLS.items()
        ],
        "sidewisp:waits-batch": [f"/waits/batch/?decision=reject&{batch}"],
        "sidewisp:audit": ["/audit/"],
        "sidewisp:glossary": ["/glossary/"],
        "admin:index": ["/admin/"],
        "admin:password_change": ["/admin/password_change/"],
        "admin:password_change_done": ["/admin/password_change/done/"],
        "admin:agents_limitsversion_settings": ["/admin/agents/limitsversion/settings/"],
        "admin:agents_limitsversion_preview": ["/admin/agents/limitsversion/preview/"],
        "admin:agents_limitsversion_diff": [f"/admin/agents/limitsversion/{limits}/diff/"],
        "admin:agents_limitsversion_rollback": [f"/admin/agents/limitsversion/{limits}/rollback/"],
    }
    walked = {name: [(path, "admin") for path in paths] for name, paths in pages.items()}
    apps = sorted({model._meta.app_label for model in admin.site._registry})
    walked["admin:app_list"] = [(f"/admin/{app}/", more["access"][f"app:{app}"]) for app in apps]
    for model in admin.site._registry:
        app, name = model._meta.app_label, model._meta.model_name
        base, pk = f"/admin/{app}/{name}/", more["firsts"][model._meta.label_lower]
        paths = {"changelist": base, "add": f"{base}add/"} | {v: f"{base}{pk}/{v}/" for v in ("change", *STOCK_ONCE)}
        for view, path in paths.items():
            key = f"admin:{app}_{name}_{view}"
            who = more["access"][key]
            shown_once_elsewhere = view in STOCK_ONCE and STOCK_ONCE[view] != f"{app}_{name}"
            walked[key] = [] if who is None or shown_once_elsewhere else [(path, who)]
        if name == "user":
            walked["admin:auth_user_password_change"] = [(f"{base}{pk}/password/", "root")]
    return walked


# --- the walk ----------------------------------------------------------------------


def _log_in(page, url: str, username: str) -> None:
    page.goto(f"{url}/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(lambda address: "/login/" not in address)


def measure(page, label: str, width: int) -> list[str]:
    """What is wrong with the page as it is now: axe's violations, and a sideways scroll on a phone."""
    if page.locator("[ws-connect]").count():
        wait_snapshot(page)  # the snapshot replaces the server-rendered fragments: measure what stays
    found = [f"{label}: {v['id']} ({v['help']}) at {v['targets']}" for v in axe_violations(page)]
    if width <= PHONE["width"]:
        scroll = page.evaluate("document.documentElement.scrollWidth")
        if scroll > width:
            found.append(f"{label}: scrolls sideways ({scroll} px wide at {width} px)")
    return found


def _open(page, url: str) -> None:
    response = page.goto(url)
    assert response is not None and response.status < 400, f"{url}: {response and response.status}"


def test_the_walk_covers_every_url_pattern():
    """Every pattern is walked or excluded with a reason; an exclusion names a pattern that exists."""
    seeded = Seeded(*[0] * len(fields(Seeded)))
    more = {"firsts": defaultdict(int), "access": defaultdict(lambda: "admin"), "waits": [], "runs": []}
    walked = set(plan(seeded, more)) | {"login", "admin:login", "sidewisp:wait-decided"}
    patterns = {_admin_key(name) for name in url_patterns()}
    assert sorted(patterns - walked - set(NOT_WALKED)) == []
    assert sorted(set(NOT_WALKED) - patterns) == []
    assert sorted(walked - patterns) == []


AREAS = ("pages", "admin")  # two halves of one walk, each within the suite's 300 s per test


@pytest.mark.parametrize("area", AREAS)
@pytest.mark.parametrize("width", list(WIDTHS))
def test_every_page_has_no_wcag_violation_and_no_sideways_scroll(browser, people_server, width, area):
    viewport = WIDTHS[width]
    url = people_server.url
    more = in_db_thread(seed_more)
    more["runs"].append(_rejected_route_run())  # its page offers the admin the declare form
    found: list[str] = []
    pages = {}

    def page_of(who: str | None):
        if who not in pages:
            context = browser.new_context(viewport=viewport, timezone_id="Europe/Berlin", bypass_csp=True)
            pages[who] = context.new_page()
            if who is not None:
                _log_in(pages[who], url, who)
        return pages[who]

    for path in ("/login/",) if area == "pages" else ("/admin/login/",):
        _open(page_of(None), url + path)
        found += measure(page_of(None), path, viewport["width"])
    for name, paths in plan(people_server.seeded, more).items():
        if name.startswith("admin:") != (area == "admin"):
            continue
        for path, who in paths:
            _open(page_of(who), url + path)
            found += measure(page_of(who), f"{name} {path} ({who})", viewport["width"])

    if area == "pages":  # the result of a decision, where its POST lands (sidewisp:wait-decided)
        page = page_of("admin")
        _open(page, f"{url}/confirm/approve/{more['waits'][1]}/")
        page.locator("button[data-confirm=approve]").click()
        expect(page.locator("#result-title")).to_be_visible()
        assert "/decided/" in page.url
        found += measure(page, "sidewisp:wait-decided", viewport["width"])
    assert found == [], "\n".join(found)
