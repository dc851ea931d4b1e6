"""POST /api/v1/estimate: will a model fit, on how many cards, with how long a context.

The body names the model by its config.json (`config`) or by its name in the node's model
store (`model`), plus the card and dtypes; the answer is workers.sizing.Estimate as JSON.
Nothing is saved and nothing is started: this only reads and computes.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from django.conf import settings
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from controlplane.services.api.errors import SpecInvalid
from workers import sizing

Errors = dict[str, list[str]]


class ModelNotInStoreError(Exception):
    """The model store has no config.json for the named model."""


def _number(data: dict, field: str, errors: Errors) -> float | None:
    value = data.get(field)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        errors[field] = [f"must be a number, not {value!r}"]
        return None
    return float(value)


def _count(data: dict, field: str, errors: Errors, *, top: int | None = None) -> int | None:
    value = data.get(field)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        errors[field] = [f"must be a whole number of at least 1, not {value!r}"]
        return None
    if top is not None and value > top:
        errors[field] = [f"must be at most {top}"]
        return None
    return value


def _dtype(data: dict, field: str, known: dict[str, Any], errors: Errors) -> str:
    value = data.get(field, "auto")
    if not isinstance(value, str) or (value.lower() != "auto" and value.lower() not in known):
        errors[field] = [f"must be auto or one of {', '.join(sorted(known))}"]
        return "auto"
    return value


def _options(data: dict, errors: Errors) -> dict[str, Any]:
    """The keyword arguments of sizing.estimate, with every bad field named in `errors`."""
    card = _number(data, "card_memory_gb", errors)
    if card is None and "card_memory_gb" not in errors:
        errors["card_memory_gb"] = ["is required: the memory of one card in GB, e.g. 80"]
    elif card is not None and card <= 0:
        errors["card_memory_gb"] = ["must be greater than 0"]
    utilization = _number(data, "gpu_memory_utilization", errors)
    if utilization is not None and not 0 < utilization <= 1:
        errors["gpu_memory_utilization"] = ["must be in (0, 1]"]
    return {
        "dtype": _dtype(data, "dtype", sizing.WEIGHT_DTYPES, errors),
        "kv_cache_dtype": _dtype(data, "kv_cache_dtype", sizing.KV_DTYPES, errors),
        "card_memory_gb": card,
        "utilization": 0.9 if utilization is None else utilization,
        "cards": _count(data, "cards", errors, top=sizing.MAX_CARDS),
        "max_model_len": _count(data, "max_model_len", errors),
    }


def _model_dir(name: Any) -> Path:
    """The model's folder in the store; SpecInvalid for a name that could leave it."""
    if not isinstance(name, str) or not name.strip():
        raise SpecInvalid({"model": ["must be a model name in the node's model store"]})
    if ".." in name or name.startswith("/") or "\\" in name:
        raise SpecInvalid({"model": ["must be a name in the model store: no '..', no leading '/'"]})
    store = Path(settings.WHARF_MODEL_DIR).resolve()
    folder = (store / name).resolve()
    if not folder.is_relative_to(store):  # a symlink pointing out of the store
        raise SpecInvalid({"model": ["must stay inside the node's model store"]})
    return folder


def _read_config(name: Any) -> dict[str, Any]:
    path = _model_dir(name) / "config.json"
    try:
        config = json.loads(path.read_text())
    except FileNotFoundError:
        raise ModelNotInStoreError(name) from None
    except OSError as exc:  # strerror only: the store's path is the node's business
        raise SpecInvalid({"model": [f"its config.json cannot be read: {exc.strerror}"]}) from None
    except ValueError as exc:
        raise SpecInvalid({"model": [f"its config.json is not valid JSON: {exc}"]}) from None
    if not isinstance(config, dict):
        raise SpecInvalid({"model": ["its config.json is not a JSON object"]})
    return config


def _config(data: dict) -> tuple[dict[str, Any], str]:
    """(config.json, the field it came from): exactly one of `config` and `model`."""
    if ("config" in data) == ("model" in data):
        message = "give exactly one of config (a config.json object) and model (a name)"
        raise SpecInvalid({"config": [message], "model": [message]})
    if "model" in data:
        return _read_config(data["model"]), "model"
    if not isinstance(data["config"], dict) or not data["config"]:
        raise SpecInvalid({"config": ["must be the model's config.json as a JSON object"]})
    return data["config"], "config"


def _missing(name: str) -> Response:
    """404: the request is well formed, the model store just does not hold that model."""
    return Response(
        {
            "detail": f"Model {name!r} is not in this node's model store (no config.json "
            "there); pass its config.json as `config` instead.",
            "errors": {"model": [f"no model {name!r} in the model store"]},
        },
        status=404,
    )


class Estimate(APIView):
    def post(self, request: Request) -> Response:
        data = request.data if isinstance(request.data, dict) else {}
        errors: Errors = {}
        options = _options(data, errors)
        try:
            config, source = _config(data)
        except SpecInvalid as exc:
            raise SpecInvalid({**errors, **exc.errors}) from None  # every error at once
        except ModelNotInStoreError:
            if not errors:
                return _missing(data["model"])
            errors["model"] = [f"no model {data['model']!r} in the model store"]
        if errors:
            raise SpecInvalid(errors)
        try:
            result = sizing.estimate(config, **options)
        except ValueError as exc:  # a config that lacks what sizing needs, key named
            raise SpecInvalid({source: [str(exc)]}) from None
        return Response(asdict(result))
