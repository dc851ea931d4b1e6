"""Model names belong to one service platform-wide: a served model name or adapter id that
another service (of any workspace) answers to is a 409 naming the field, since the gateway
routes a `model` to one service and a second claimant would take the first one's callers."""

from __future__ import annotations

from rest_framework import exceptions

from contracts.spec import ServiceSpec, SpecError, typed_spec
from contracts.spec_facts import model_ids
from controlplane.services import spec_memo
from controlplane.services.choices import DesiredState
from controlplane.services.models import Service
from controlplane.workspaces.models import Workspace


class NameTaken(exceptions.APIException):
    status_code = 409

    def __init__(self, errors: dict[str, list[str]]):
        detail = "A model name this spec serves is another service's; nothing was saved."
        super().__init__({"detail": detail, "errors": errors})


def _model_ids(service: Service) -> frozenset[str] | None:
    """The model ids a service answers to (kept per generation); None for a spec stored before
    a rule tightened, still routed by its name."""
    try:
        return frozenset(model_ids(typed_spec(service.spec)))
    except SpecError:
        return None


def check_model_names(spec: ServiceSpec, workspace: Workspace, service: Service | None = None):
    """Raise NameTaken if a live service but `service` answers to a model id `spec` (of
    `workspace`) serves. Another workspace's service is "another service", never named."""
    wanted = model_ids(spec)
    others = Service.objects.exclude(desired_state=DesiredState.DELETED)
    if service is not None:
        others = others.exclude(pk=service.pk)
    errors: dict[str, list[str]] = {}
    for (name, workspace_id), ids in spec_memo.each(others, _model_ids, "name", "workspace_id"):
        taken = (ids if ids is not None else {name}) & wanted.keys()
        for model in sorted(taken):
            whose = (f"service {name!r}" if workspace_id == workspace.pk
                     else "another service")  # fmt: skip
            errors.setdefault(wanted[model], []).append(
                f"model {model!r} is served by {whose}; choose another name"
            )
    if errors:
        raise NameTaken(errors)
