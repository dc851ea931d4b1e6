"""The gateway feeds the instances of each Async service it routes from the service's input
queue, as EAS's own framework does inside each instance, but from outside: the engine needs no
code of Wharf's.

Each pass it asks the store for items for the ready instances in its snapshot; the store hands
out only what each instance's window leaves free, counted across every gateway, so an instance
never works on more than its window whichever gateways feed it. Each item is POSTed to its
instance (the path it was put on, its body and content type, the engine's key), and the answer,
whatever its status, goes to the sink. An item whose instance could not be reached, or broke the
connection before answering, is given back: another instance takes it, up to the service's
`queue.max_delivery` deliveries. The gateway renews its leases while its instances work; if it
dies, they lapse and the items go to another gateway. A batch request waits for its API key's
rpm and tpm like an online call (gateway.queues.holds).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import os
import socket
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import httpx

from contracts import engine_tls
from contracts.batch import usage_of
from contracts.routing import RoutedInstance, RoutedService, Snapshot
from contracts.sharing import queued_slots
from contracts.usage import SERVICE_TOKEN_ID
from gateway.background import STOP_GRACE
from gateway.config import Settings
from gateway.engine_auth import EngineKeys
from gateway.errors import RATE_LIMITED, error_body
from gateway.limits.admission import Admission, Limiter
from gateway.observe.metrics import Metrics
from gateway.observe.usage import UsageRecorder
from gateway.queues.holds import KeyHolds, Refused
from gateway.queues.online import OnlineElsewhere
from gateway.queues.plane_client import PlaneClient, PlaneError
from gateway.routing.balancer import Balancer

log = logging.getLogger(__name__)

POLL_S = 1.0  # between passes when nothing wakes the feeder
LEASE_S = 30.0  # a lease not renewed lapses after this; renewed every third of it
FINISH_TRIES = 5
BATCH_WINDOW = 4  # a Standard service without worker_threads (the store bounds it too)
_TOOK_WEIGHT = 0.3  # of the latest answered item's duration in a service's usual one
ANSWERED, GIVEN_BACK, DROPPED = "answered", "given_back", "dropped"  # an item's outcomes
JSON = "application/json"


def holder_name() -> str:
    """This gateway process, as the store records who works on an item."""
    return f"{socket.gethostname()[:32]}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class QueueFeeder:
    def __init__(
        self,
        plane: PlaneClient,
        engine_keys: EngineKeys,
        balancer: Balancer,
        metrics: Metrics,
        timeout: float,
        poll_s: float = POLL_S,
        lease_s: float = LEASE_S,
        usage: UsageRecorder | None = None,
        batch_window: int = BATCH_WINDOW,
        elsewhere: OnlineElsewhere | None = None,
        holds: KeyHolds | None = None,
    ) -> None:
        self._plane = plane
        self._holds = holds
        self._keys = engine_keys
        self._balancer = balancer
        self._metrics = metrics
        self._timeout = timeout
        self._poll_s = poll_s
        self._lease_s = lease_s
        self.holder = holder_name()
        self._usage = usage
        self._elsewhere = elsewhere
        self._batch_window = batch_window
        self._instance_of: dict[int, str] = {}  # item index -> the instance working on it
        self._took: dict[str, float] = {}  # service -> an item's usual duration, seconds
        self._services: dict[str, RoutedService] = {}
        self._working: dict[int, asyncio.Task] = {}
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task] = []
        self._client = httpx.AsyncClient(
            timeout=httpx.Timeout(timeout, connect=5.0),
            verify=engine_tls.client_context(),  # https:// fronts (contracts.engine_tls)
        )

    def seen(self, snapshot: Snapshot) -> None:
        self._services = {name: s for name, s in snapshot.services.items() if s.queued or s.fed}
        if self._holds is not None:
            self._holds.seen(snapshot)
        self.nudge()

    def nudge(self) -> None:
        """Look for work now (an item was put, one finished, the instances changed)."""
        self._wake.set()

    @property
    def working(self) -> int:
        return len(self._working)

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._run()), asyncio.create_task(self._renew())]

    async def stop(self) -> None:
        """Stop leasing; the items in hand are given back so that others take them at once."""
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        working = list(self._working.items())
        for _, task in working:
            task.cancel()
        for _, task in working:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if working:
            await self._give_back_all([index for index, _ in working])
        await self._client.aclose()

    async def _give_back_all(self, indexes: list[int]) -> None:
        """Together, and for STOP_GRACE at most: a control plane that does not answer must not
        hold up the stop (SIGTERM). What it did not take back lapses with its lease and goes
        to another gateway, as if this one had died."""

        async def give_back(index: int) -> None:
            with contextlib.suppress(PlaneError):
                await self._plane.give_back(index, self.holder, "its gateway stopped")

        tasks = [asyncio.create_task(give_back(index)) for index in indexes]
        _, late = await asyncio.wait(tasks, timeout=STOP_GRACE)
        for task in late:
            task.cancel()
        await asyncio.gather(*late, return_exceptions=True)
        if late:
            log.warning(
                "queue: %d items not given back within %.0f s of the stop; they go to "
                "another gateway when their leases lapse", len(late), STOP_GRACE,
            )  # fmt: skip

    async def _run(self) -> None:
        while True:
            self._wake.clear()
            for service in list(self._services.values()):
                await self._feed(service)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self._poll_s)

    async def _feed(self, service: RoutedService) -> None:
        # An instance that just failed sits out the balancer's cool-down here too.
        instances = {i.name: i for i in service.instances if not self._balancer.cooling(i.url)}
        if not instances:
            return
        # Online calls first: while this gateway (or, as their reports say, another) has one
        # in flight at the service, no new queued item starts (contracts.sharing).
        elsewhere = await self._elsewhere.counts() if self._elsewhere else {}
        online = {
            name: self._balancer.in_flight(i.url) + elsewhere.get(name, 0)
            for name, i in instances.items()
        }
        queued: dict[str, int] = {}
        for name in self._instance_of.values():
            queued[name] = queued.get(name, 0) + 1
        window = service.queue_window or service.worker_threads or self._batch_window
        quiet = self._balancer.quiet_for([i.url for i in instances.values()])
        due = {name: self._balancer.next_call_in(i.url) for name, i in instances.items()}
        room = queued_slots(window, online, queued, quiet, due, self._took.get(service.name, 0))
        if not any(room.values()):
            return
        held = self._holds.held() if self._holds is not None else []
        try:
            items = await self._plane.lease(
                service.name, self.holder, list(instances), self._lease_s, room, held
            )
        except PlaneError as exc:
            log.warning("queue of %s: could not lease items: %s", service.name, exc)
            return
        for item in items:
            instance = instances.get(str(item.get("instance")))
            index = int(item["index"])
            # Its instance failed (or left) while the lease was asked for: not sent, so the
            # delivery does not count, and another instance takes it.
            if instance is None or self._balancer.cooling(instance.url):
                with contextlib.suppress(PlaneError):
                    await self._plane.give_back(
                        index, self.holder, "its instance failed before it was sent",
                        delivered=False,
                    )  # fmt: skip
                continue
            admission = await self._holds.admit(service.name, item) if self._holds else None
            if isinstance(admission, Refused):
                await self._refuse(index, admission)
                continue
            task = asyncio.create_task(self._work(service, instance, item, admission))
            self._working[index] = task
            self._instance_of[index] = instance.name

    async def _refuse(self, index: int, refused: Refused) -> None:
        """A batch request its key's rpm/tpm hold back: back to the store undelivered, or,
        larger than the key's whole tpm, answered with the limiter's 429."""
        refusal = refused.refusal
        if refusal.retryable:
            with contextlib.suppress(PlaneError):
                await self._plane.give_back(
                    index, self.holder, refusal.message, delivered=False
                )  # fmt: skip
            return
        body = error_body(refusal.error_type, RATE_LIMITED, refusal.message, None)
        await self._settle(
            lambda: self._plane.finish(
                index, self.holder, refusal.status, json.dumps(body).encode(), JSON
            )
        )

    async def _work(
        self,
        service: RoutedService,
        instance: RoutedInstance,
        item: dict[str, Any],
        admission: Admission | None = None,
    ) -> None:
        index = int(item["index"])
        started = time.monotonic()
        alone = self._alone(instance.name)
        tokens: int | None = 0  # what the key's tpm is charged: nothing unless it ran
        try:
            answer = await self._call(service, instance, item)
            if not isinstance(answer, str) and alone and self._alone(instance.name):
                # An item's usual duration, for the gaps between online calls: one that ran
                # beside other items of the queue's took longer than one alone would.
                self._timed(service.name, time.monotonic() - started)
            if isinstance(answer, str):
                await self._settle(lambda: self._plane.give_back(index, self.holder, answer))
                self._metrics.queue_items.labels(service.name, GIVEN_BACK).inc()
                return
            status, body, kind = answer
            taken = await self._settle(
                lambda: self._plane.finish(index, self.holder, status, body, kind)
            )
            self._metrics.queue_items.labels(service.name, ANSWERED if taken else DROPPED).inc()
            prompt, completion = usage_of(body)
            # The answer's usage replaces the estimate; without usage a success keeps it.
            tokens = prompt + completion if prompt + completion or status >= 400 else None
            if taken and status < 400 and self._usage is not None:
                # A batch's tokens count on its key
                key_id = str(item.get("key_id") or "") or SERVICE_TOKEN_ID
                self._usage.add(
                    service.name, key_id, prompt, completion, batch=bool(item.get("batch"))
                )
            if taken:
                waited = float(item.get("age_s", 0)) + time.monotonic() - started
                self._metrics.queue_latency.labels(service.name).observe(waited)
        finally:
            if self._holds is not None:
                self._holds.release(admission, tokens)
            self._working.pop(index, None)
            self._instance_of.pop(index, None)
            self.nudge()

    def _alone(self, instance: str) -> bool:
        """Whether the instance works on no queued item of this gateway's but one."""
        return sum(name == instance for name in self._instance_of.values()) <= 1

    def _timed(self, service: str, took: float) -> None:
        usual = self._took.get(service)
        self._took[service] = took if usual is None else usual + _TOOK_WEIGHT * (took - usual)

    async def _call(
        self, service: RoutedService, instance: RoutedInstance, item: dict[str, Any]
    ) -> tuple[int, bytes, str] | str:
        """The instance's answer, or why it gave none (then the item goes to another)."""
        path = str(item.get("path") or "").lstrip("/")
        url = instance.url.rstrip("/") + "/" + path
        name, value = self._keys.authorization(instance)
        headers = {name: value}
        if item.get("content_type"):
            headers["content-type"] = str(item["content_type"])
        timeout = service.timeout or self._timeout
        try:
            answer = await self._client.post(
                url,
                content=base64.b64decode(item.get("data", "")),
                headers=headers,
                timeout=timeout,
            )
        except httpx.TimeoutException:
            self._balancer.cool_down(instance.url)
            return f"instance {instance.name} gave no answer within {timeout:g} s"
        except httpx.HTTPError as exc:
            self._balancer.cool_down(instance.url)
            return f"instance {instance.name} failed: {type(exc).__name__}"
        return answer.status_code, answer.content, answer.headers.get("content-type", "")

    async def _settle(self, call: Callable[[], Awaitable[bool]]) -> bool:
        """Tell the store, retrying while it cannot be reached: the lease covers the wait,
        and if it lapses first the item goes to another instance (its answer here is then
        not recorded: the store takes an item's answer once). Whether the store took it."""
        for attempt in range(FINISH_TRIES):
            try:
                return await call()
            except PlaneError as exc:
                log.warning("queue: could not record an item's end: %s", exc)
                await asyncio.sleep(0.5 * 2**attempt)
        return False

    async def _renew(self) -> None:
        while True:
            await asyncio.sleep(self._lease_s / 3)
            if self._working:
                with contextlib.suppress(PlaneError):
                    await self._plane.renew(self.holder, list(self._working), self._lease_s)


class Queues:
    """A gateway's part in the queues: its client of the store and its feeder."""

    def __init__(
        self,
        settings: Settings,
        engine_keys: EngineKeys,
        balancer: Balancer,
        metrics: Metrics,
        usage: UsageRecorder | None = None,
        elsewhere: OnlineElsewhere | None = None,
        limiter: Limiter | None = None,
    ) -> None:
        self.plane = PlaneClient(settings.api_url, settings.secret_key)
        self.feeder = QueueFeeder(
            self.plane,
            engine_keys,
            balancer,
            metrics,
            settings.upstream_timeout,
            lease_s=settings.queue_lease,
            usage=usage,
            elsewhere=elsewhere,
            batch_window=settings.batch_window,
            holds=KeyHolds(limiter) if limiter is not None else None,
        )

    def start(self) -> None:
        self.feeder.start()

    async def stop(self) -> None:
        await self.feeder.stop()
        await self.plane.close()
