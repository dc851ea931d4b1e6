"""EAS's `metadata.enable_webservice`: the service is a web application (a Stable Diffusion
WebUI, ComfyUI, a Gradio app) whose pages the gateway serves under `/web/<service>/` to
browsers the console signed in (contracts.webapp). It shapes no instance: out of the spec hash."""

from __future__ import annotations

from pydantic import Field

from contracts.spec_fleet import _Strict

# Metadata fields that shape no instance (contracts.spec.ServiceSpec.spec_hash leaves them out).
NOT_SHAPING = ("enable_webservice",)


class WebService(_Strict):
    enable_webservice: bool = Field(
        default=False,
        description="Serve the service's web UI (its containers' port) through the gateway at "
        "/web/<service>/ to users the console signs in; the console links it as Open web UI.",
    )
