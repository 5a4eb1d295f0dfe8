"""Group-send latency and loss of channels-redis layers: pubsub vs core (two capacities).

Prints figures, never pass/fail. Run against a real Redis:

    REDIS_URL=redis://127.0.0.1:6379/0 .venv/bin/python bench/channel_layer.py \
        [--burst 2000] [--receivers 1] [--concurrency 1]

For each layer: an unloaded round trip (send one, wait for it, 200 times),
then a burst of group_send calls as fast as one sender can go while the
receivers read concurrently. Loss is what had not arrived 2 s after the last
send; latency is send→receive per message that arrived.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
import uuid

from channels_redis.core import RedisChannelLayer
from channels_redis.pubsub import RedisPubSubChannelLayer

QUIET_SECONDS = 2.0


def layers(url: str) -> dict[str, object]:
    prefix = f"bench-{uuid.uuid4().hex[:6]}"
    return {
        "pubsub": lambda: RedisPubSubChannelLayer(hosts=[url], prefix=prefix),
        "core capacity=100 (default)": lambda: RedisChannelLayer(hosts=[url], prefix=prefix),
        "core capacity=5000": lambda: RedisChannelLayer(hosts=[url], prefix=prefix, capacity=5000),
    }


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def unloaded(layer, group: str, rounds: int = 200) -> list[float]:
    channel = await layer.new_channel()
    await layer.group_add(group, channel)
    latencies = []
    for i in range(rounds):
        sent = time.perf_counter()
        await layer.group_send(group, {"type": "bench", "n": i})
        await asyncio.wait_for(layer.receive(channel), 2)
        latencies.append((time.perf_counter() - sent) * 1000)
    await layer.group_discard(group, channel)
    return latencies


async def burst(layer, group: str, count: int, receivers: int, concurrency: int) -> tuple[list[float], int, float]:
    channels = [await layer.new_channel() for _ in range(receivers)]
    for channel in channels:
        await layer.group_add(group, channel)
    sent_at: dict[int, float] = {}
    latencies: list[float] = []
    received = 0

    async def read(channel: str) -> None:
        nonlocal received
        while True:
            message = await layer.receive(channel)
            latencies.append((time.perf_counter() - sent_at[message["n"]]) * 1000)
            received += 1

    readers = [asyncio.create_task(read(c)) for c in channels]
    await asyncio.sleep(0.2)  # let subscriptions settle
    started = time.perf_counter()

    async def send(n: int) -> None:
        sent_at[n] = time.perf_counter()
        await layer.group_send(group, {"type": "bench", "n": n})

    for first in range(0, count, concurrency):  # `concurrency` sends in flight at once
        await asyncio.gather(*(send(n) for n in range(first, min(count, first + concurrency))))
    send_seconds = time.perf_counter() - started
    last = -1
    while received != last:  # wait until nothing arrives for QUIET_SECONDS
        last = received
        await asyncio.sleep(QUIET_SECONDS)
    for task in readers:
        task.cancel()
    for channel in channels:
        await layer.group_discard(group, channel)
    return latencies, count * receivers - received, send_seconds


def show(name: str, idle: list[float], latencies: list[float], lost: int, expected: int, seconds: float) -> None:
    print(f"\n{name}")
    print(
        f"  unloaded round trip  p50 {percentile(idle, 0.5):6.2f} ms  p99 {percentile(idle, 0.99):6.2f} ms"
        f"  max {max(idle):6.2f} ms"
    )
    print(
        f"  burst of {expected:>5}      sent in {seconds:5.2f} s ({expected / seconds:7.0f}/s)"
        f"  lost {lost} ({100 * lost / expected:.1f} %)"
    )
    if latencies:
        print(
            f"  burst latency        p50 {percentile(latencies, 0.5):6.1f} ms"
            f"  p99 {percentile(latencies, 0.99):6.1f} ms"
            f"  max {max(latencies):6.1f} ms  mean {statistics.fmean(latencies):6.1f} ms"
        )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--burst", type=int, default=2000)
    parser.add_argument("--receivers", type=int, default=1, help="consumers in the group (open pages)")
    parser.add_argument("--concurrency", type=int, default=1, help="group_send calls in flight at once")
    args = parser.parse_args()
    url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    print(
        f"channels-redis group_send -> receive, Redis {url}, burst {args.burst}, {args.receivers} receiver(s), "
        f"{args.concurrency} send(s) in flight"
    )
    for name, make in layers(url).items():
        layer = make()
        group = f"g{uuid.uuid4().hex[:8]}"
        idle = await unloaded(layer, group)
        latencies, lost, seconds = await burst(layer, group + "b", args.burst, args.receivers, args.concurrency)
        show(name, idle, latencies, lost, args.burst * args.receivers, seconds)
        await layer.flush()  # the prefix is this run's own


if __name__ == "__main__":
    asyncio.run(main())
