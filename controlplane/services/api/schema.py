"""GET /api/v1/schema/spec: the service spec's JSON Schema, generated from its pydantic models
(contracts.spec), the one source the API validates with and the console and the CLI read."""

from __future__ import annotations

from functools import cache
from typing import Any

from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from contracts.spec import ServiceSpec

DIALECT = "https://json-schema.org/draft/2020-12/schema"


@cache
def spec_schema() -> dict[str, Any]:
    schema = ServiceSpec.model_json_schema()
    return {"$schema": DIALECT, "$id": "/api/v1/schema/spec", **schema}


class SpecSchema(APIView):
    """Public: the schema of what may be sent, never anything stored."""

    permission_classes = [AllowAny]
    authentication_classes: list = []

    def get(self, request: Request) -> Response:
        return Response(spec_schema())
