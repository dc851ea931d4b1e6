"""How a service is called: its token, as EAS's service JSON fixes it (`token`,
`generate_token`). The API gives the gateway its digest (controlplane.tokens); the spec keeps
it sealed and shows it masked (controlplane.services.secrets)."""

from __future__ import annotations

from pydantic import Field, ValidationInfo, field_validator

from contracts.spec_fleet import _Strict


class ServiceAccess(_Strict):
    token: str | None = Field(
        default=None, min_length=16, max_length=256, pattern=r"^[\x21-\x7e]+$",
        description="The service's token, fixed (EAS's token): the gateway takes it as the "
        "service's token, kept across updates; a new one replaces it. None: Wharf makes one.",
    )  # fmt: skip
    generate_token: bool | None = Field(
        default=None,
        description="EAS's switch: a token is always required here, so false needs a token.",
    )

    @field_validator("generate_token")
    @classmethod
    def _a_token(cls, value: bool | None, info: ValidationInfo) -> bool | None:
        if value is False and not info.data.get("token"):
            raise ValueError(
                "false needs a token: every service here is called with one; give token, or "
                "leave generate_token out"
            )
        return value
