from __future__ import annotations

from django.urls import path

from sidewisp.live.consumers import HealthConsumer

websocket_urlpatterns: list = [
    path("ws/health/", HealthConsumer.as_asgi()),
]
