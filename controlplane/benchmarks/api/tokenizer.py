"""GET /api/v1/services/<name>/tokenizer: the tokenizer files of the model a service runs, so
`wharf bench` can build prompts of exactly the asked token count without a copy of the model.

The files come from where the model is: a node that runs an instance of the service reads
them from the folder that instance's engine reads (model store, staged object storage or hub
commit, a path on the node), asked through Redis as a log is (contracts.node_tokenizer), the
nodes of ready instances first. A service with no instance to ask, or whose nodes do not
answer, is served a model-store model from the API host's own store, when it has it. Only a
tokenizer's small text files are served (each size-capped), and only from inside the model's
folder. Who may read the service's logs may read its tokenizer.
"""

from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.db.models import Case, IntegerField, Value, When
from django.shortcuts import get_object_or_404
from rest_framework.exceptions import APIException, NotFound
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from contracts.node_logs import CLUSTER
from contracts.node_tokenizer import TOKENIZER, TokenizerFilesError, read_tokenizer
from contracts.spec import MODEL_STORE_NAME, SpecError, typed_spec
from controlplane import intents
from controlplane.services.api.views import visible_services
from controlplane.services.choices import InstanceState
from controlplane.services.models import Instance, Service

PASS_DIR = "pass --tokenizer DIR (a folder with the model's tokenizer.json) to wharf bench"
# The instances whose node has staged the model and may be asked, best first.
HOLDING = (InstanceState.READY, InstanceState.UNHEALTHY, InstanceState.STARTING,
           InstanceState.BACKOFF)  # fmt: skip
MAX_NODES = 3  # nodes asked before giving up, each for up to node_tokenizer.fetch's timeout


class NodeSilent(APIException):
    status_code = 504
    default_code = "node_silent"


def _model(service: Service) -> str:
    """The service's llm.model; NotFound saying so when it names none."""
    try:
        spec = typed_spec(service.plain_spec())
    except SpecError:
        spec = None
    model = spec.llm.model if spec is not None and spec.llm else None
    if not model:
        raise NotFound(f"Service {service.name!r} names no model (llm.model); {PASS_DIR}.")
    return model


def _holders(service: Service) -> list[Instance]:
    """One instance per node that may be asked (not a pod: the cluster's workers cannot read
    its files), ready ones first, at most MAX_NODES."""
    rank = Case(*(When(state=state, then=Value(i)) for i, state in enumerate(HOLDING)),
                output_field=IntegerField())  # fmt: skip
    rows = (
        Instance.objects.filter(service=service, state__in=HOLDING)
        .exclude(node="")
        .exclude(runtime=CLUSTER)
        .order_by(rank, "name")
    )
    by_node: dict[str, Instance] = {}
    for row in rows:
        by_node.setdefault(row.node, row)
    return list(by_node.values())[:MAX_NODES]


def _from_store(model: str) -> dict[str, str] | None:
    """The tokenizer files of model-store model `model` in the API host's store, if there."""
    if "://" in model or model.startswith("/") or not MODEL_STORE_NAME.fullmatch(model):
        return None
    store = Path(settings.WHARF_MODEL_DIR)
    try:
        return read_tokenizer(store / model, store)
    except TokenizerFilesError:
        return None


class ServiceTokenizer(APIView):
    def get(self, request: Request, name: str) -> Response:
        service = get_object_or_404(visible_services(request), name=name)
        model = _model(service)
        silent = []
        for instance in _holders(service):
            answer = intents.tokenizer_files(instance.node, instance.name)
            if answer is None:
                silent.append(instance.node)
            elif isinstance(answer.get("files"), dict):
                return Response({"model": model, "node": instance.node, "files": answer["files"]})
            else:
                raise NotFound(f"No tokenizer for service {name!r}: {answer.get('error')}; "
                               f"{PASS_DIR}.")  # fmt: skip
        files = _from_store(model)
        if files is not None:
            return Response({"model": model, "node": None, "files": files})
        if silent:
            raise NodeSilent(f"node {', '.join(silent)} did not answer for the tokenizer of "
                             f"{name!r}; is its worker running? Or {PASS_DIR}.")  # fmt: skip
        raise NotFound(
            f"No instance of service {name!r} runs on a node that could read {model!r}'s "
            f"{TOKENIZER} (start the service, or wait until an instance is up); or {PASS_DIR}."
        )
