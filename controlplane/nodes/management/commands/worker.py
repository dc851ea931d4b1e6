"""`manage.py worker --node NAME --address ADDR`: this host's worker, as a node of the fleet.

The rest comes from the usual environment (DATABASE_URL, REDIS_URL, WHARF_SECRET_KEY, ...);
the command checks the node's settings and then becomes the Celery worker (with its beat),
which registers the node and heartbeats.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import re
import sys
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from contracts.log_format import log_format, log_level
from controlplane.nodes.state import parse_labels

log = logging.getLogger(__name__)

NODE_NAME = re.compile(r"[a-z0-9]([a-z0-9.-]{0,61}[a-z0-9])?")


class Command(BaseCommand):
    help = "Run this host's worker as a node of the fleet (registers, heartbeats, reconciles)."

    def add_arguments(self, parser):
        parser.add_argument("--node", default=settings.WHARF_NODE_NAME, help="the node's name")
        parser.add_argument("--address", default=settings.WHARF_NODE_ADDRESS,
                            help="the IP address gateways reach its instances at")  # fmt: skip
        parser.add_argument("--labels", default=settings.WHARF_NODE_LABELS,
                            help="placement labels: gpu=h200,zone=a")  # fmt: skip
        parser.add_argument("--concurrency", type=int, default=4)

    def handle(self, *args, node: str, address: str, labels: str, concurrency: int, **_):
        node = node.lower()
        if not NODE_NAME.fullmatch(node):
            raise CommandError(f"--node {node!r}: lower-case letters, digits, '.' and '-'")
        try:
            ipaddress.ip_address(address)
        except ValueError:
            raise CommandError(f"--address {address!r} is not an IP address") from None
        try:
            parse_labels(labels)
        except ValueError as exc:
            raise CommandError(f"--labels: {exc}") from None
        os.environ.update(
            WHARF_NODE_NAME=node, WHARF_NODE_ADDRESS=address, WHARF_NODE_LABELS=labels
        )
        schedule = settings.WHARF_HOME / f"celerybeat-schedule-{node}"
        argv = celery_worker_argv(schedule, concurrency, log_level(), log_format() == "json",
                                  hostname=f"{node}@%h")  # fmt: skip
        log.info("node %s at %s: starting its worker", node, address)
        for handler in logging.getLogger().handlers:
            handler.flush()
        os.execv(sys.executable, argv)


# Celery's talk between workers, which Wharf does not use (it revokes no task and asks no
# worker for its state; a node's own heartbeat is its Node row): mingle waits a second at each
# start for every other worker's answer, and gossip has every worker receive every other's
# heartbeat event, so Redis's traffic grows with the square of the nodes
# (benchmarks/worker_chatter.py). `celery inspect` still answers (remote control stays on).
ALONE = ("--without-mingle", "--without-gossip", "--without-heartbeat")


def celery_worker_argv(
    schedule: Path, concurrency: int, level: str, json_logs: bool, hostname: str = ""
) -> list[str]:
    """The Celery worker with its beat, as `manage.py worker` and `make run` start it. Celery's
    start-up banner is for people: JSON lines (WHARF_LOG_FORMAT=json) go without it; its log
    lines keep Wharf's format (settings: CELERY_WORKER_HIJACK_ROOT_LOGGER)."""
    return [sys.executable, "-m", "celery", "-A", "workers.celery",
            *(["--quiet"] if json_logs else []), "worker", "--beat", "--pool", "threads",
            "--concurrency", str(concurrency), "--loglevel", level,
            *(["--hostname", hostname] if hostname else []), "--schedule", str(schedule),
            *ALONE]  # fmt: skip
