"""Every API error has one shape: {"detail": "...", "errors": {"<field path>": ["..."]}}."""

from __future__ import annotations

from rest_framework import exceptions
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler


class SpecInvalid(exceptions.ValidationError):
    def __init__(self, errors: dict[str, list[str]]):
        super().__init__(errors)
        self.errors = errors


def exception_handler(exc, context):
    if isinstance(exc, SpecInvalid):
        count = sum(len(v) for v in exc.errors.values())
        detail = (
            f"The spec is invalid ({count} error{'s' if count != 1 else ''}); nothing was saved."
        )
        return Response({"detail": detail, "errors": exc.errors}, status=400)
    response = drf_exception_handler(exc, context)
    if response is not None and not (isinstance(response.data, dict) and "detail" in response.data):
        response.data = {"detail": "The request is invalid.", "errors": response.data}
    return response
