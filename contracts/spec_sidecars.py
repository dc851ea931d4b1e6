"""The rules of a spec with several containers in one instance (EAS's multi-container
services): containers[0] is the main one, the engine when an llm section is given, whose port
takes the traffic and whose probes decide readiness and liveness; the others are its
sidecars (contracts.engines.sidecars says what they share). Pure; checked by
contracts.spec_rules.cross_checks. Their ports are checked beside the engine's
(contracts.engines.sidecars.sidecar_errors), which knows the engine's default port."""

from __future__ import annotations

from contracts.spec import ServiceSpec
from contracts.spec_probes import PROBE_FIELDS


def sidecar_rules(spec: ServiceSpec) -> dict[str, list[str]]:
    errors: dict[str, list[str]] = {}
    if len(spec.containers) > 1 and spec.llm is not None and spec.llm.pd is not None:
        errors["containers"] = [
            "a prefill/decode-separated service runs one container per instance: remove "
            "containers[1:] or llm.pd"
        ]
    for i, container in enumerate(spec.containers):
        if i == 0:
            continue
        where = f"containers[{i}]"
        if not container.image and spec.llm is not None:  # without llm: spec_rules says so
            errors[f"{where}.image"] = ["a container beside the engine needs its image"]
        for name in PROBE_FIELDS:
            if getattr(container, name) is not None:
                errors[f"{where}.{name}"] = [
                    "only containers[0]'s probes are run (they decide the whole instance's "
                    f"readiness): probe this container's port from containers[0].{name} "
                    "(the containers share localhost), or remove it"
                ]
        if container.prepare is not None:
            errors[f"{where}.prepare"] = [
                "Python requirements are installed before containers[0]'s command only: "
                "install them in this container's image or at the start of its script"
            ]
    return errors
