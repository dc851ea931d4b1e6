"""Model names belong to one service platform-wide: a served model name or adapter id that
another service (of any workspace) answers to is a 409 naming the field, since the gateway
routes a `model` to one service and a second claimant would take the first one's callers.

Each live service holds its model ids as rows of ModelName, whose name is unique: a write
claims the ids its spec serves and lets go of the rest in the caller's transaction, and the
unique index settles two writes claiming one id at once (the second waits for the first to
commit and is refused). A check reads only the ids asked for, not every service's spec."""

from __future__ import annotations

from django.db import IntegrityError, transaction
from django.db.models import Q
from rest_framework import exceptions

from contracts.spec import ServiceSpec
from contracts.spec_facts import model_ids
from controlplane.services.models import ModelName, Service
from controlplane.workspaces.models import Workspace


class NameTaken(exceptions.APIException):
    status_code = 409

    def __init__(self, errors: dict[str, list[str]]):
        detail = "A model name this spec serves is another service's; nothing was saved."
        self.errors = errors
        super().__init__({"detail": detail, "errors": errors})


HOLDER = ("name", "service__name", "service__workspace_id")  # a claimed id, and who holds it


def check_model_names(spec: ServiceSpec, workspace: Workspace, service: Service | None = None):
    """Raise NameTaken if a live service but `service` holds a model id `spec` (of
    `workspace`) serves. Another workspace's service is "another service", never named."""
    wanted = model_ids(spec)
    held = ModelName.objects.filter(name__in=wanted).exclude(service=service)
    _refuse_held(wanted, workspace, held.values_list(*HOLDER).order_by("name"))


def _refuse_held(wanted: dict[str, str], workspace: Workspace, held) -> None:
    """NameTaken naming the field of each id in `held` (rows of HOLDER), if any."""
    errors: dict[str, list[str]] = {}
    for model, name, workspace_id in held:
        whose = f"service {name!r}" if workspace_id == workspace.pk else "another service"
        errors.setdefault(wanted[model], []).append(
            f"model {model!r} is served by {whose}; choose another name"
        )
    if errors:
        raise NameTaken(errors)


def claim_model_names(spec: ServiceSpec, service: Service) -> None:
    """`service` holds exactly the model ids `spec` serves, in the caller's transaction;
    NameTaken when another service holds one, also one claimed by a write not yet committed
    when this one read (the unique index makes this one wait for it, then refuses). One read
    finds both the ids others hold and the service's own."""
    wanted = model_ids(spec)
    rows = ModelName.objects.filter(Q(name__in=wanted) | Q(service=service))
    rows = rows.values_list("service_id", *HOLDER).order_by("name")
    _refuse_held(wanted, service.workspace, [row[1:] for row in rows if row[0] != service.pk])
    mine = {model for holder, model, *_ in rows if holder == service.pk}
    ModelName.objects.filter(service=service, name__in=mine - wanted.keys()).delete()
    missing = [model for model in wanted if model not in mine]
    try:
        with transaction.atomic():  # a savepoint: the caller's transaction stays usable
            ModelName.objects.bulk_create([ModelName(name=m, service=service) for m in missing])
    except IntegrityError:
        check_model_names(spec, service.workspace, service)  # who holds it, now committed
        raise NameTaken({wanted[model]: [f"model {model!r} was just taken by another "
                                         "service; choose another name"]
                         for model in missing}) from None  # fmt: skip


def release_model_names(service: Service) -> None:
    """A deleted service answers to no model id: another may take its names at once."""
    ModelName.objects.filter(service=service).delete()
