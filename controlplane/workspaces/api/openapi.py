"""The workspace views in the OpenAPI schema; controlplane/openapi.py calls
describe_workspace_views from its describe_views."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from controlplane.workspaces import roles
from controlplane.workspaces.api import grants, views
from controlplane.workspaces.quotas import CARD_KINDS

ROLE = {"type": "string", "enum": list(roles.ROLES)}
LIMIT = {"type": ["integer", "null"], "minimum": 0}
QUOTAS = {"type": "object", "additionalProperties": False, "properties": {
    "services": LIMIT, "instances": LIMIT,
    "queued_items": {**LIMIT, "description": "Async items and batch requests not yet answered; "
                     "none set: WHARF_QUEUE_MAX_ITEMS_PER_WORKSPACE"},
    "cards": {"type": "object", "additionalProperties": False,
              "properties": {kind: LIMIT for kind in CARD_KINDS}}}}  # fmt: skip
WORKSPACE = {"type": "object", "properties": {
    "name": {"type": "string"}, "role": {**ROLE, "type": ["string", "null"],
                                         "description": "yours; null for staff outside it"},
    "created_at": {"type": "string", "format": "date-time"},
    "members": {"type": "integer"}, "quotas": QUOTAS,
    "ceilings": {**QUOTAS, "description": "set by staff; quotas may not pass them"},
    "limits": {**QUOTAS, "description": "what is enforced: each quota capped by its ceiling"},
    "used": {"type": "object",
             "description": "services; instances and cards while running"}}}  # fmt: skip
GRANTS = {"$ref": "#/components/schemas/Grants"}  # contracts.grants' own schema
MEMBER = {"type": "object", "properties": {
    "user": {"type": "string"}, "role": ROLE,
    "since": {"type": "string", "format": "date-time"}}}  # fmt: skip


def _body(required: list[str], properties: dict[str, Any]) -> dict[str, Any]:
    return {"application/json": {"type": "object", "additionalProperties": False,
                                 "required": required, "properties": properties}}  # fmt: skip


def describe_workspace_views(V: Callable, _op: Callable, errors: dict) -> None:  # noqa: N803
    V(get=_op("workspaces_list", "Your workspaces (staff: every one)",
              responses={200: {"type": "array", "items": WORKSPACE}}),
      post=_op("workspaces_create", "Create a workspace (staff)",
               request=_body(["name"], {"name": {"type": "string", "maxLength": 63}}),
               responses={201: WORKSPACE, 403: errors, 409: errors}),
      )(views.WorkspaceList)  # fmt: skip
    V(get=_op("workspaces_get", "A workspace, its quotas and what is used of them",
              responses={200: WORKSPACE}),
      patch=_op("workspaces_quotas", "Set quotas (admins) or ceilings (staff); null: none",
                request=_body([], {"quotas": QUOTAS, "ceilings": QUOTAS}),
                responses={200: WORKSPACE, 403: errors}),
      delete=_op("workspaces_delete", "Delete an empty workspace (owners)",
                 responses={204: None, 403: errors, 409: errors}),
      )(views.WorkspaceDetail)  # fmt: skip
    V(get=_op("workspaces_grants_get", "What the workspace's specs may use of shared ground",
              responses={200: GRANTS}),
      put=_op("workspaces_grants_set", "Set the grants (staff); what is left out is closed",
              request={"application/json": GRANTS}, responses={200: GRANTS, 403: errors}),
      )(grants.WorkspaceGrants)  # fmt: skip
    V(get=_op("members_list", "A workspace's members",
              responses={200: {"type": "array", "items": MEMBER}}),
      post=_op("members_add", "Add a member (admins; owners for an owner)",
               request=_body(["user", "role"], {"user": {"type": "string"}, "role": ROLE}),
               responses={201: MEMBER, 403: errors, 409: errors}),
      )(views.MemberList)  # fmt: skip
    V(get=_op("members_get", "A member", responses={200: MEMBER}),
      patch=_op("members_change", "Change a member's role",
                request=_body(["role"], {"role": ROLE}), responses={200: MEMBER, 403: errors}),
      delete=_op("members_remove", "Remove a member", responses={204: None, 403: errors}),
      )(views.MemberDetail)  # fmt: skip
