"""The cache backend: Django's Redis cache, without the client CPU it spends on each call and each connection.

Django's `RedisCacheClient` builds a new `redis.Redis` for every cache call, and a `redis.Redis` copies its
169 response callbacks into a case-insensitive dict each time it is built: about two thirds of a `cache.get`'s
CPU (the evidence writer reads the alert rules' version once a batch, `receipts.notify.alerts.verdict_rules`).
Here a cache keeps one `redis.Redis` per connection pool (it holds no state of its own: each command takes a
connection from the pool, which a forked child replaces with its own). And redis-py reads its own version
from its installed metadata (`importlib.metadata`, about 4 ms) for every new connection it makes, to tell the
server in `CLIENT SETINFO`: here every connection of the cache says the same, read once from the package.
The commands sent are the same.
"""

from __future__ import annotations

import redis
from django.core.cache.backends import redis as django_redis
from redis.driver_info import DriverInfo

# What redis-py would tell the server itself (name "redis-py", the installed version), made once per process.
DRIVER = DriverInfo(name="redis-py", lib_version=redis.__version__)


class _KeptClient(django_redis.RedisCacheClient):
    def __init__(self, servers, **options) -> None:
        options.setdefault("driver_info", DRIVER)
        super().__init__(servers, **options)
        self._clients: dict[object, redis.Redis] = {}

    def get_client(self, key=None, *, write=False) -> redis.Redis:
        pool = self._get_connection_pool(write)
        client = self._clients.get(pool)
        if client is None:
            client = self._clients[pool] = self._client(connection_pool=pool)
        return client


class RedisCache(django_redis.RedisCache):
    """`django.core.cache.backends.redis.RedisCache` with one Redis client kept per connection pool."""

    def __init__(self, server, params) -> None:
        super().__init__(server, params)
        self._class = _KeptClient
