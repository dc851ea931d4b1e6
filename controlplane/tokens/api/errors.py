"""A 400 in the API's one error shape, for requests that are not service specs."""

from __future__ import annotations

from rest_framework import exceptions


class Invalid(exceptions.APIException):
    """Every bad field at once: {"detail": "...", "errors": {"<field>": ["..."]}}."""

    status_code = 400

    def __init__(self, what: str, errors: dict[str, list[str]], consequence: str = ""):
        count = sum(len(messages) for messages in errors.values())
        detail = f"The {what} is invalid ({count} error{'s' if count != 1 else ''}){consequence}."
        super().__init__({"detail": detail, "errors": errors})
        self.errors = errors
