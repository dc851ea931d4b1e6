"""POST /api/v1/estimate: will a model fit, on how many cards, with how long a context.

The body names the model by its config.json (`config`) or by its name in the node's model
store (`model`), plus the card and dtypes; the answer is contracts.sizing.Estimate as JSON.
Nothing is saved and nothing is started: this only reads and computes. Every number is
bounded (contracts/model_config.py for config.json, sizing.MAX_* for the rest), so one estimate
is a few hundred integer operations whatever the body says.
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

from contracts import model_config, sizing
from contracts.model_config import describe
from contracts.spec import MODEL_STORE_NAME
from contracts.spec_models import DEFAULT_LORA, MAX_ADAPTERS, MAX_LORA_RANK
from controlplane.services.api.errors import SpecInvalid

Errors = dict[str, list[str]]

# A model-store name is at most this long (a folder name on Linux is at most 255 bytes).
MAX_MODEL_NAME_CHARS = 200


class ModelNotInStoreError(Exception):
    """The model store has no config.json for the named model."""


def _number(data: dict, field: str, errors: Errors, *, top: float) -> float | None:
    """A number above 0 and at most `top`, checked before float() can overflow on it."""
    value = data.get(field)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= top:
        errors[field] = [f"must be a number above 0 and at most {top:g}, not {describe(value)}"]
        return None
    return float(value)


def _count(data: dict, field: str, errors: Errors, *, top: int) -> int | None:
    value = data.get(field)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= top:
        errors[field] = [f"must be a whole number from 1 to {top:,}, not {describe(value)}"]
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
    card = _number(data, "card_memory_gb", errors, top=sizing.MAX_CARD_MEMORY_GB)
    if card is None and "card_memory_gb" not in errors:
        errors["card_memory_gb"] = ["is required: the memory of one card in GB, e.g. 80"]
    utilization = _number(data, "gpu_memory_utilization", errors, top=1)
    return {
        "dtype": _dtype(data, "dtype", sizing.WEIGHT_DTYPES, errors),
        "kv_cache_dtype": _dtype(data, "kv_cache_dtype", sizing.KV_DTYPES, errors),
        "card_memory_gb": card,
        "utilization": 0.9 if utilization is None else utilization,
        "cards": _count(data, "cards", errors, top=sizing.MAX_CARDS),
        "max_model_len": _count(data, "max_model_len", errors, top=model_config.MAX_POSITIONS),
        "lora": _lora(data, errors),
    }


def _lora(data: dict, errors: Errors) -> tuple[int, int]:
    """(max_loras, max_lora_rank) of served LoRA adapters: (0, 0) without; vLLM's defaults
    (1 slot, rank 16) for the one not given."""
    slots = _count(data, "max_loras", errors, top=MAX_ADAPTERS)
    rank = _count(data, "max_lora_rank", errors, top=MAX_LORA_RANK)
    if slots is None and rank is None:
        return 0, 0
    return slots or DEFAULT_LORA[0], rank or DEFAULT_LORA[1]


def _model_dir(name: Any) -> Path:
    """The model's folder in the store; SpecInvalid for a name that could leave it."""
    if not isinstance(name, str) or not name.strip():
        raise SpecInvalid({"model": ["must be a model name in the node's model store"]})
    if len(name) > MAX_MODEL_NAME_CHARS or not MODEL_STORE_NAME.fullmatch(name) or ".." in name:
        raise SpecInvalid(
            {
                "model": [
                    f"must be a model-store name like 'tiny-llama' or 'org/model' (letters, "
                    f"digits, '.', '_', '-'; at most {MAX_MODEL_NAME_CHARS} characters), "
                    f"not {describe(name)}"
                ]
            }
        )
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
    except RecursionError:
        raise SpecInvalid({"model": ["its config.json nests too deeply to be a config"]}) from None
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


def _config_errors(config: dict[str, Any], source: str) -> Errors:
    """What sizing cannot read in config.json, by field path: `config.num_hidden_layers`
    (or `model.num_hidden_layers` for a config.json read from the model store)."""
    return {f"{source}.{key}": v for key, v in model_config.problems(config).items()}


class Estimate(APIView):
    rights = None  # a computation over the shared model store: no workspace's data

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
        else:
            errors.update(_config_errors(config, source))
        if errors:
            raise SpecInvalid(errors)
        # Every argument is checked above, so sizing raises nothing here: an error would be
        # a bug in the checks, and a 500 is the honest answer to that.
        return Response(asdict(sizing.estimate(config, **options)))
