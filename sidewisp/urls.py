from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from sidewisp import api, batchviews, views
from sidewisp.ops import metrics
from sidewisp.pages import declarepage, glossary, history, mappage
from sidewisp.pages.decidedpage import wait_decided
from sidewisp.sso import views as sso

page_patterns = (
    [
        path("", views.overview, name="overview"),
        path("runs/", views.runs, name="runs"),
        path("runs/<int:pk>/", views.run_detail, name="run-detail"),
        path("runs/<int:pk>/history/", history.run_history, name="run-history"),  # issue 21 §1
        path("runs/start/", views.run_start, name="run-start"),
        path("runs/start/create/", views.run_create, name="run-create"),
        path("waits/", views.waits, name="waits"),
        path("false-completions/", views.false_completions, name="false-completions"),
        path("system/", views.system, name="system"),
        path("map/", mappage.team_map, name="map"),  # the team map (issue 21 §2)
        path("confirm/<str:what>/<int:pk>/", views.confirm, name="confirm"),
        path("waits/batch/", batchviews.waits_batch, name="waits-batch"),  # issue 30 §7
        path("waits/batch/decide/", batchviews.waits_batch_decide, name="waits-batch-decide"),
        path("waits/<int:pk>/decide/", views.wait_decide, name="wait-decide"),
        path("waits/<int:pk>/decided/", wait_decided, name="wait-decided"),  # where the decision's POST sends you
        path("waits/<int:pk>/reassign/", views.wait_reassign, name="wait-reassign"),
        path("waits/<int:pk>/cancel/", views.wait_cancel, name="wait-cancel"),
        path("handoffs/<int:pk>/reopen/", views.task_reopen, name="task-reopen"),
        path("handoffs/<int:pk>/verify/", views.task_verify, name="task-verify"),
        path("handoffs/<int:pk>/accept/", views.task_accept, name="task-accept"),
        path("handoffs/<int:pk>/resolve/", views.task_resolve, name="task-resolve"),
        path("runs/<int:pk>/stop/", views.run_stop, name="run-stop"),
        path("runs/<int:pk>/resume/", views.run_resume, name="run-resume"),
        path("runs/<int:pk>/retry/", views.run_retry, name="run-retry"),
        path("runs/<int:pk>/declare/", declarepage.run_declare, name="run-declare"),  # issue 28 §8
        path("audit/", views.audit_log, name="audit"),
        path("audit.csv", views.audit_csv, name="audit-csv"),
        path("glossary/", glossary.glossary, name="glossary"),  # issue 30 §4
    ],
    "sidewisp",
)

# --- issue 14 §4: the receipts API (source tokens, no session) ---
api_patterns = (
    [
        path("receipts", api.post_receipts, name="receipts"),
        # The claim first: an operation id may itself contain a slash.
        path("decisions/<path:operation_id>/claim", api.claim_decision, name="decision-claim"),
        path("decisions/<path:operation_id>", api.get_decision, name="decision"),
    ],
    "api",
)
# --- end issue 14 §4

urlpatterns = [
    # "dashboard" is the overview's historical name (LOGIN_REDIRECT_URL uses it).
    path("", views.overview, name="dashboard"),
    path("", include(page_patterns)),
    path("healthz", views.healthz, name="healthz"),
    path("metrics", metrics.scrape, name="metrics"),  # Prometheus (sidewisp.ops.metrics: token or allowed address)
    path("login/", sso.LoginView.as_view(), name="login"),  # with "Sign in with …" when single sign-on is on
    path("sso/login/", sso.SignInStart.as_view(), name="sso-login"),  # issue 22 §1 (404 when off)
    path("sso/callback/", sso.SignInCallback.as_view(), name="sso-callback"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    path("api/v1/", include(api_patterns)),  # issue 14 §4
]

handler403 = "sidewisp.views.forbidden"
# A database lost outside a view (a session not saved is a 400) is still the 503 page (sidewisp.web.refusals).
handler400 = "sidewisp.web.refusals.bad_request"
handler500 = "sidewisp.web.refusals.server_error"

admin.site.site_header = admin.site.site_title = "Sidewisp administration"
admin.site.index_title = "Limits, contracts and evidence"
