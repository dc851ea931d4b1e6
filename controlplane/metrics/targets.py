"""Which instances have engine metrics, and where: the instance's spec version rendered by its
engine adapter (contracts.engine_metrics.metrics_path). Used by the nodes' scrapers and by the
Prometheus service-discovery endpoint."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from urllib.parse import urlsplit

from contracts.engine_metrics import metrics_path
from controlplane.services.choices import InstanceState
from controlplane.services.models import Instance

log = logging.getLogger(__name__)


class MetricsPaths:
    """Each instance's metrics path, worked out once per (service, spec version, role): a
    scraper asks every few seconds, and a spec version's engine never changes."""

    def __init__(self) -> None:
        self._paths: dict[tuple[int, str, str], str | None] = {}

    def of(self, row: Instance) -> str | None:
        key = (row.service_id, row.spec_hash, row.role)
        if key not in self._paths:
            self._paths[key] = self._render(row)
        return self._paths[key]

    @staticmethod
    def _render(row: Instance) -> str | None:
        spec = row.placed_spec()
        if spec is None:
            return None
        try:
            return metrics_path(spec, row.role)
        except Exception as exc:  # an adapter that cannot render it: nothing to scrape
            log.warning("no metrics path for %s: %s", row.name, exc)
            return None


@dataclass(frozen=True)
class Target:
    """An engine whose metrics can be read: its instance and the page's URL."""

    instance: Instance
    url: str  # the instance's base URL, no trailing slash
    path: str  # the metrics path, from "/"

    @property
    def metrics_url(self) -> str:
        return self.url + self.path


def ready_targets(instances, paths: MetricsPaths) -> list[Target]:
    """The ready instances among `instances` (a queryset) that have a URL and whose engine
    has a metrics page."""
    rows = (
        instances.filter(state=InstanceState.READY)
        .exclude(url="")
        .select_related("service__workspace")
    )
    targets = []
    for row in rows.order_by("name"):
        path = paths.of(row)
        if path is not None:
            targets.append(Target(row, row.url.rstrip("/"), "/" + path.lstrip("/")))
    return targets


def sd_group(target: Target) -> dict:
    """One target group of Prometheus' HTTP service discovery: the engine's host:port and the
    labels the Grafana dashboard groups by (an empty role: not prefill/decode-separated)."""
    row = target.instance
    parts = urlsplit(target.url)
    return {
        "targets": [parts.netloc],
        "labels": {
            "__scheme__": parts.scheme or "http",
            "__metrics_path__": parts.path + target.path,
            "wharf_service": row.service.name,
            "wharf_instance": row.name,
            "wharf_role": row.role,
            "wharf_node": row.node,
            "wharf_workspace": row.service.workspace.name,
        },
    }
