"""The Redis broker transport, with one kombu fault closed (kombu 5.7.0, the latest release).

When Redis goes away, the worker's consumer calls `Connection.collect()`. A
channel whose `close()` is cut short by the dead socket (its BRPOP read, or
restoring its unacked messages, raises a connection error) keeps pointing at
its transport, and the transport then drops its client (`client = None`).
Anything that later needs a fresh Redis pool on that old channel — the ack of
an `acks_late` task that finishes after the reconnect, a requeue, restoring
its unacked messages at exit — reads `transport.client.hostname` in
`Channel._connparams` and raises `AttributeError`. That is not one of the
transport's connection errors, so kombu's and Celery's cleanup does not
swallow it and the worker stops with "Unrecoverable error".

Here such a channel raises a redis `ConnectionError` instead: the ack is
logged as lost, the message stays in the unacked index, and kombu's restore
sweep delivers it again after the visibility timeout (our tasks are
idempotent). Selected by `CELERY_BROKER_TRANSPORT`.
"""

from __future__ import annotations

from kombu.transport import redis as kombu_redis
from redis.exceptions import ConnectionError as RedisConnectionError


class Channel(kombu_redis.Channel):
    def _connparams(self, asynchronous: bool = False) -> dict:
        transport = self.connection
        if transport is None or transport.client is None:
            msg = "the broker connection of this channel was closed"
            raise RedisConnectionError(msg)
        return super()._connparams(asynchronous=asynchronous)


class Transport(kombu_redis.Transport):
    Channel = Channel
