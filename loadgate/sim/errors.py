"""Error answers of the simulated engine, in the engines' own body shapes.

vLLM (OpenAI routes, and the injected HTTP faults): `{"error": {"message", "type", "param",
"code"}}` with `code` equal to the HTTP status, as recorded in the fixtures.
SGLang (`/generate`): `{"error": {"message": ...}}`.
"""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web

ERROR_TYPES = {
    400: "BadRequestError",
    404: "NotFoundError",
    429: "TooManyRequestsError",
    500: "InternalServerError",
    503: "ServiceUnavailableError",
}


class ApiError(Exception):
    """A request the engine refuses: HTTP status, message and the offending parameter."""

    def __init__(self, status: int, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param

    def vllm_body(self) -> dict[str, Any]:
        """vLLM's error object for this error."""
        return {"error": {"message": self.message, "type": ERROR_TYPES.get(self.status, "Error"),
                          "param": self.param, "code": self.status}}

    def sglang_body(self) -> dict[str, Any]:
        """SGLang's error object for this error."""
        return {"error": {"message": self.message}}

    def response(self, style: str = "vllm") -> web.Response:
        """The HTTP response: `style` is "vllm" or "sglang"."""
        body = self.vllm_body() if style == "vllm" else self.sglang_body()
        return web.Response(status=self.status, body=orjson.dumps(body), content_type="application/json")


def bad_request(message: str, param: str | None = None) -> ApiError:
    """A 400 error."""
    return ApiError(400, message, param)
