"""The operator's limits for tenant instances (contracts.limits), from the settings: what the
API checks specs against and previews with, and what the workers' runtimes and the
Kubernetes manifests apply."""

from __future__ import annotations

from django.conf import settings

from contracts.limits import TenantLimits


def tenant_limits() -> TenantLimits:
    return TenantLimits(
        memory_mb=settings.WHARF_DEFAULT_MEMORY_MB,
        cpus=settings.WHARF_DEFAULT_CPUS,
        pids=settings.WHARF_PIDS_LIMIT,
        memory_empty_dir_mb=settings.WHARF_MEMORY_EMPTY_DIR_MAX_MB,
    )
