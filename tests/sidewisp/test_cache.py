"""Issue 32 §2: the cache backend (sidewisp.cache) keeps one Redis client per connection pool and tells the
server what redis-py would without reading the package's metadata for each connection; what it stores and
reads is Django's Redis cache's."""

from __future__ import annotations

from importlib import metadata
from unittest import mock

import pytest
import redis
from django.core.cache import cache
from django.core.cache.backends.redis import RedisCache as DjangoRedisCache

from sidewisp import cache as sidewisp_cache


def test_the_configured_cache_is_djangos_redis_cache_with_its_clients_kept():
    backend = cache._cache  # the RedisCacheClient of this thread's cache
    assert isinstance(backend, sidewisp_cache._KeptClient)
    # One client for every call (Django's own builds a new redis.Redis, 169 callbacks copied, each time).
    assert backend.get_client("k") is backend.get_client("k") is backend.get_client("k", write=True)


def test_it_stores_and_reads_what_djangos_redis_cache_does(celery_isolation):
    from django.conf import settings

    params = {**settings.CACHES["default"], "KEY_PREFIX": f"{celery_isolation}-same"}
    plain = DjangoRedisCache(params["LOCATION"], params)
    kept = sidewisp_cache.RedisCache(params["LOCATION"], params)
    try:
        kept.set("a", {"x": [1, 2]}, timeout=None)
        assert plain.get("a") == kept.get("a") == {"x": [1, 2]}
        assert kept.add("a", 1) is plain.add("a", 1) is False
        assert kept.add("b", 5, timeout=30) is True
        assert plain.incr("b") == 6 and kept.incr("b", 2) == 8
        assert kept.get_many(["a", "b", "c"]) == plain.get_many(["a", "b", "c"]) == {"a": {"x": [1, 2]}, "b": 8}
        assert kept.delete("a") is True and plain.get("a", "gone") == "gone"
    finally:
        plain.delete_many(["a", "b"])
        plain.close()
        kept.close()


def test_a_new_connection_tells_the_server_redis_py_and_its_version_without_reading_metadata():
    """What `CLIENT SETINFO` sends (Redis 7.2 and later keep it; older servers refuse it, redis-py ignores that)."""
    pool = cache._cache._get_connection_pool(True)
    with mock.patch("redis.utils.metadata.version", side_effect=AssertionError("metadata read")) as read:
        connection = pool.make_connection()
    assert not read.called
    default = redis.Connection()  # what redis-py tells by itself
    assert connection.driver_info.formatted_name == default.driver_info.formatted_name == "redis-py"
    assert connection.driver_info.lib_version == default.driver_info.lib_version == metadata.version("redis")


@pytest.mark.parametrize("field", ["name", "lib_version"])
def test_the_driver_told_is_redis_pys_own_default(field):
    from redis.driver_info import DriverInfo

    assert getattr(sidewisp_cache.DRIVER, field) == getattr(DriverInfo(), field)
