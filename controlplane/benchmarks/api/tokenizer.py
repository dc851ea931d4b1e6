"""GET /api/v1/services/<name>/tokenizer: the tokenizer files of the model a service runs, so
`wharf bench` can build prompts of exactly the asked token count without a copy of the model.

Only a model-store name (llm.model `tiny-llama`, `org/model`) is served, from the API host's
settings.WHARF_MODEL_DIR; every file is resolved and must stay inside the store, so a symlink
cannot hand out a file from elsewhere. Anything else is a 404 that says to pass --tokenizer.
"""

from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.shortcuts import get_object_or_404
from rest_framework.exceptions import NotFound
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from contracts.spec import MODEL_STORE_NAME, SpecError, typed_spec
from controlplane.services.api.views import visible_services
from controlplane.services.models import Service

TOKENIZER = "tokenizer.json"
OPTIONAL = ("tokenizer_config.json",)
MAX_FILE_BYTES = 64 * 1024 * 1024  # the largest tokenizer.json files on the hubs are ~30 MB
PASS_DIR = "pass --tokenizer DIR (a folder with the model's tokenizer.json) to wharf bench"


def _store_model(service: Service) -> str:
    """The service's model-store name; NotFound saying why when it runs something else."""
    try:
        spec = typed_spec(service.plain_spec())
    except SpecError:
        spec = None
    model = spec.llm.model if spec is not None and spec.llm else None
    if not model:
        raise NotFound(f"Service {service.name!r} names no model (llm.model); {PASS_DIR}.")
    if "://" in model or model.startswith("/") or not MODEL_STORE_NAME.fullmatch(model):
        raise NotFound(
            f"Service {service.name!r} runs {model!r}, which is not in the model store, so its "
            f"tokenizer cannot be served here; {PASS_DIR}."
        )
    return model


def _inside(store: Path, path: Path) -> Path | None:
    """`path` with every link followed, when it is a file inside the store; else None."""
    resolved = path.resolve()
    if not resolved.is_relative_to(store) or not resolved.is_file():
        return None
    return resolved


def _read(store: Path, folder: Path, name: str, model: str) -> str | None:
    path = _inside(store, folder / name)
    if path is None:
        return None
    if path.stat().st_size > MAX_FILE_BYTES:
        raise NotFound(f"{model}'s {name} is larger than {MAX_FILE_BYTES >> 20} MiB; {PASS_DIR}.")
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:  # no path in the message: the store's business
        reason = type(exc).__name__
        raise NotFound(f"{model}'s {name} cannot be read ({reason}); {PASS_DIR}.") from None


class ServiceTokenizer(APIView):
    def get(self, request: Request, name: str) -> Response:
        service = get_object_or_404(visible_services(request), name=name)
        model = _store_model(service)
        store = Path(settings.WHARF_MODEL_DIR).resolve()
        folder = store / model
        tokenizer = _read(store, folder, TOKENIZER, model)
        if tokenizer is None:
            raise NotFound(f"The model store has no {TOKENIZER} for {model!r}; {PASS_DIR}.")
        files = {TOKENIZER: tokenizer}
        for optional in OPTIONAL:
            if (text := _read(store, folder, optional, model)) is not None:
                files[optional] = text
        return Response({"model": model, "files": files})
