"""ASGI entry point: HTTP through Django, WebSockets through Channels."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "sidewisp.settings")
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402
from django.conf import settings  # noqa: E402
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler  # noqa: E402

from sidewisp.routing import websocket_urlpatterns  # noqa: E402
from sidewisp.web.longlines import answer_long_lines  # noqa: E402
from sidewisp.web.proxies import TrustedProxyHeaders  # noqa: E402
from sidewisp.web.security import SameOriginWebSocket  # noqa: E402

answer_long_lines()  # under daphne: a request line past 16 KB is a 414, not a dropped connection
http_app = ASGIStaticFilesHandler(django_asgi_app) if settings.SIDEWISP_SERVE_STATIC else django_asgi_app

# Outermost: the client address and scheme every layer below sees (sidewisp.web.proxies).
application = TrustedProxyHeaders(
    ProtocolTypeRouter(
        {
            "http": http_app,
            "websocket": SameOriginWebSocket(
                AllowedHostsOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns)))
            ),
        }
    )
)
