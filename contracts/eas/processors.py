"""EAS processor services (its built-in PMML, TensorFlow, Triton, EasyRec processors, or a
processor package of the user's: `processor`, `processor_path`, `model_path`, …) get a clear
answer: Wharf runs images, so each such field is a 400 saying what to deploy instead."""

from __future__ import annotations

from typing import Any

FIELDS = (
    "processor", "processor_path", "processor_entry", "processor_mainclass", "processor_type",
    "processor_params", "processor_envs", "processor_jvm_options", "processor_image",
    "processor_name", "model_path", "model_entry", "model_config", "oss_endpoint",
)  # fmt: skip
# Built-in processors with a well-known serving image to deploy instead.
IMAGES = {
    "triton": "nvcr.io/nvidia/tritonserver (command: tritonserver --model-repository=<mount>)",
    "tensorflow": "tensorflow/serving (command: tensorflow_model_server --model_base_path=<mount>)",
    "pmml": "an image with a PMML server (e.g. openscoring/openscoring)",
}
INSTEAD = ("Wharf runs images, not EAS processors: deploy an image in containers[] (image, "
           "command or script, port) with the model mounted from storage[]")  # fmt: skip


def processor_errors(data: Any) -> dict[str, list[str]]:
    """{field: [what to do]} for each processor field of EAS document `data`."""
    if not isinstance(data, dict):
        return {}
    found = [name for name in FIELDS if name in data]
    if not found:
        return {}
    processor = str(data.get("processor") or "")
    image = next((hint for key, hint in IMAGES.items() if processor.startswith(key)), None)
    why = INSTEAD + (f"; for {processor!r}: {image}" if image else "")
    return {name: [why] for name in found}
