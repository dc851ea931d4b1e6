"""A gateway's queue feeder stops within its grace on SIGTERM (gateway.queues.feeder), even when
the control plane takes an item's lease and then stops answering: the items in hand it could not
give back lapse with their leases and go to another gateway, as when a gateway dies."""

from __future__ import annotations

import asyncio
import logging
import time

from gateway_support import ServerThread, service, wait_until
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from contracts.routing import RoutedInstance, Snapshot
from gateway.background import STOP_GRACE
from gateway.engine_auth import EngineKeys
from gateway.observe.metrics import Metrics
from gateway.queues.feeder import QueueFeeder
from gateway.queues.plane_client import PlaneClient
from gateway.routing.balancer import Balancer

SECRET = b"s" * 32


class HungPlane:
    """Leases one item to instance i-0, then answers nothing (a control plane that hangs)."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.leased = False

    async def lease(self, request: Request) -> Response:
        self.calls.append("lease")
        items = [] if self.leased else [{"index": 7, "instance": "i-0", "path": "/", "data": ""}]
        self.leased = True
        return JSONResponse({"items": items})

    async def hang(self, request: Request) -> Response:
        self.calls.append(request.url.path.rsplit("/", 1)[-1])
        await asyncio.sleep(3600)
        return Response()

    def app(self) -> Starlette:
        return Starlette(routes=[
            Route("/internal/queues/lease", self.lease, methods=["POST"]),
            Route("/internal/queues/{call}", self.hang, methods=["POST"]),
        ])  # fmt: skip


async def _engine(request: Request) -> Response:
    await asyncio.sleep(3600)  # works on the item until the stop
    return Response()


def test_the_feeder_stops_within_its_grace_when_the_control_plane_hangs(caplog) -> None:
    plane = HungPlane()
    plane_server = ServerThread(plane.app()).start()
    engine = ServerThread(Starlette(routes=[Route("/", _engine, methods=["POST"])])).start()
    svc = service("sd", [RoutedInstance("i-0", engine.url)], [], queued=True, queue_window=1)

    async def scenario() -> float:
        feeder = QueueFeeder(PlaneClient(plane_server.url, SECRET), EngineKeys(SECRET),
                             Balancer(), Metrics(), timeout=600, poll_s=0.05)  # fmt: skip
        feeder.seen(Snapshot(version=1, services={"sd": svc}))
        feeder.start()
        deadline = time.monotonic() + 10
        while feeder.working < 1 and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        assert feeder.working == 1, plane.calls
        began = time.monotonic()
        await feeder.stop()
        return time.monotonic() - began

    try:
        with caplog.at_level(logging.WARNING, logger="gateway.queues.feeder"):
            took = asyncio.run(scenario())
    finally:
        plane_server.stop()
        engine.stop()
    assert took < STOP_GRACE + 1.5, took  # not the plane client's 10 s per item
    assert wait_until(lambda: "finish" in plane.calls, 2), plane.calls  # the give-back was sent
    assert "1 items not given back" in caplog.text
