"""DRF's `?format=` renderer override, answered in the API's one error shape."""

from __future__ import annotations

from rest_framework.negotiation import DefaultContentNegotiation

from controlplane.tokens.api.errors import Invalid

FORMAT = "format"  # DRF's URL_FORMAT_OVERRIDE: a query parameter of every view


class NamedFormatNegotiation(DefaultContentNegotiation):
    """A `format` naming no renderer is a 400 naming the parameter, not DRF's bare
    404 "Not found." (which reads as if the endpoint or the object were missing)."""

    def filter_renderers(self, renderers, format):
        chosen = [renderer for renderer in renderers if renderer.format == format]
        if not chosen:
            formats = ", ".join(renderer.format for renderer in renderers)
            raise Invalid("query", {FORMAT: [f"one of {formats}"]})
        return chosen
