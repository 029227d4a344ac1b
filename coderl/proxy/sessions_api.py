"""Admin routes: create, read, complete and delete sessions (``Authorization: Bearer <admin token>``)."""

from __future__ import annotations

import json
from typing import Any, Literal

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, ConfigDict, ValidationError

from coderl.proxy.auth import check_admin
from coderl.proxy.errors import ApiError, validation_message
from coderl.proxy.service import ProxyService


class NewSession(BaseModel):
    model_config = ConfigDict(extra="forbid")

    metadata: dict[str, Any] = {}
    """Free-form labels kept with the session (task_id is used as the trajectories' task_id)."""


def new_session_body(raw: bytes) -> NewSession:
    """The body of ``POST /sessions``: none, or JSON whatever the Content-Type says (``curl -d`` sends
    a form type)."""
    if not raw.strip():
        return NewSession()
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise ApiError(
            400,
            f"POST /sessions takes a JSON body such as {{\"metadata\": {{\"task_id\": \"t1\"}}}} (or none); "
            f"this one is not JSON: {exc}",
        ) from None
    try:
        return NewSession.model_validate(data)
    except ValidationError as exc:
        message, param = validation_message(exc.errors())
        raise ApiError(400, message, param=param) from None


_NEW_SESSION_DOC = {
    "requestBody": {
        "required": False,
        "content": {"application/json": {"schema": NewSession.model_json_schema()}},
    }
}


def sessions_router(service: ProxyService, admin_token: str) -> APIRouter:
    router = APIRouter(tags=["sessions"])

    def base_url(request: Request) -> str:
        return (service.cfg.public_url or str(request.base_url)).rstrip("/")

    @router.post("/sessions", status_code=201, openapi_extra=_NEW_SESSION_DOC)
    async def create(request: Request) -> dict[str, Any]:
        check_admin(request, admin_token)
        body = new_session_body(await request.body())
        row, secret = service.create_session(body.metadata)
        root = f"{base_url(request)}/s/{row.id}"
        return {
            "id": row.id,
            "secret": secret,
            "openai_base_url": f"{root}/v1",
            "anthropic_base_url": root,
            "ttl_s": service.cfg.session_ttl_s,
        }

    @router.get("/sessions")
    async def listing(
        request: Request,
        status: Literal["active", "complete", "expired"] | None = None,
        limit: int = Query(100, ge=1, le=10_000),
    ) -> dict[str, Any]:
        """The newest sessions (optionally of one status), each with its number of calls."""
        check_admin(request, admin_token)
        return {"sessions": service.list_sessions(status, limit)}

    @router.get("/sessions/{session_id}")
    async def read(session_id: str, request: Request) -> dict[str, Any]:
        check_admin(request, admin_token)
        return service.record(session_id)

    @router.post("/sessions/{session_id}/complete")
    async def complete(session_id: str, request: Request) -> dict[str, Any]:
        check_admin(request, admin_token)
        row = service.complete(session_id)
        await service.release([session_id])
        return {"id": row.id, "status": row.status}

    @router.delete("/sessions/{session_id}")
    async def delete(session_id: str, request: Request) -> dict[str, Any]:
        check_admin(request, admin_token)
        service.delete(session_id)
        await service.release([session_id])
        return {"id": session_id, "deleted": True}

    return router
