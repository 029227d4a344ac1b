"""Admin routes: create, read, complete and delete sessions (``Authorization: Bearer <admin token>``)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict

from coderl.proxy.auth import check_admin
from coderl.proxy.service import ProxyService


class NewSession(BaseModel):
    model_config = ConfigDict(extra="forbid")

    metadata: dict[str, Any] = {}
    """Free-form labels kept with the session (task_id is used as the trajectories' task_id)."""


def sessions_router(service: ProxyService, admin_token: str) -> APIRouter:
    router = APIRouter(tags=["sessions"])

    def base_url(request: Request) -> str:
        return (service.cfg.public_url or str(request.base_url)).rstrip("/")

    @router.post("/sessions", status_code=201)
    async def create(request: Request, body: NewSession | None = None) -> dict[str, Any]:
        check_admin(request, admin_token)
        row, secret = service.create_session((body or NewSession()).metadata)
        root = f"{base_url(request)}/s/{row.id}"
        return {
            "id": row.id,
            "secret": secret,
            "openai_base_url": f"{root}/v1",
            "anthropic_base_url": root,
            "ttl_s": service.cfg.session_ttl_s,
        }

    @router.get("/sessions/{session_id}")
    async def read(session_id: str, request: Request) -> dict[str, Any]:
        check_admin(request, admin_token)
        return service.record(session_id)

    @router.post("/sessions/{session_id}/complete")
    async def complete(session_id: str, request: Request) -> dict[str, Any]:
        check_admin(request, admin_token)
        row = service.complete(session_id)
        return {"id": row.id, "status": row.status}

    @router.delete("/sessions/{session_id}")
    async def delete(session_id: str, request: Request) -> dict[str, Any]:
        check_admin(request, admin_token)
        service.delete(session_id)
        return {"id": session_id, "deleted": True}

    return router
