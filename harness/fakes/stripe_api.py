"""A local stand-in for the slice of Stripe's API that refund-bot uses, for the real stripe SDK.

POST /v1/refunds with Stripe's idempotency semantics (the same key and parameters replay the first
response with `Idempotent-Replayed: true`; the same key with other parameters is a 400
idempotency_error) and its limit (a PaymentIntent this fake created cannot be refunded beyond its
amount: charge_already_refunded once fully refunded), GET /v1/refunds?payment_intent=…,
bearer-key auth, injected 5xx answers, and an injected refusal shaped as Stripe's 400s.
"""

from __future__ import annotations

import itertools
import json
import time
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from harness.fakes.loopback import LoopbackFake


async def _form(request: web.Request) -> dict[str, str]:
    """A POST's fields. The SDK sends form-encoded bodies, as Stripe takes: strings, no files."""
    params = {}
    for name, value in dict(await request.post()).items():
        assert isinstance(value, str), name
        params[name] = value
    return params


@dataclass
class RecordedRequest:
    method: str
    path: str
    params: dict[str, str]
    idempotency_key: str | None


@dataclass
class FakeStripe(LoopbackFake):
    api_key: str = "sk_test_fake_key"
    requests: list[RecordedRequest] = field(default_factory=list)
    refunds: dict[str, dict[str, Any]] = field(default_factory=dict)
    payment_intents: dict[str, dict[str, Any]] = field(default_factory=dict)
    _by_key: dict[str, tuple[dict[str, str], dict[str, Any]]] = field(default_factory=dict)
    _ids: itertools.count = field(default_factory=lambda: itertools.count(1))
    _refusal: tuple[str | None, str, str | None] | None = None

    def refuse_next_refund(
        self, message: str, *, code: str | None = None, param: str | None = None
    ) -> None:
        """Answer the next refund request with a 400 invalid_request_error, as Stripe does."""
        self._refusal = (code, message, param)

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/refunds", self._create)
        app.router.add_get("/v1/refunds", self._list)
        app.router.add_post("/v1/payment_intents", self._payment_intent)

    def _error(
        self,
        status: int,
        kind: str,
        message: str,
        code: str | None = None,
        param: str | None = None,
    ) -> web.Response:
        error = {"type": kind, "message": message}
        error |= {"code": code} if code else {}
        error |= {"param": param} if param else {}
        headers = {"Request-Id": "req_fake"}
        return web.json_response({"error": error}, status=status, headers=headers)

    def _authorized(self, request: web.Request) -> bool:
        return request.headers.get("Authorization") == f"Bearer {self.api_key}"

    async def _create(self, request: web.Request) -> web.Response:
        params = await _form(request)
        key = request.headers.get("Idempotency-Key")
        self.requests.append(RecordedRequest("POST", request.path, params, key))
        if not self._authorized(request):
            return self._error(401, "invalid_request_error", "Invalid API Key provided")
        if self.take_failure():
            return self._error(500, "api_error", "Something went wrong on Stripe's end.")
        if key and key in self._by_key:
            first_params, first_response = self._by_key[key]
            if first_params != params:
                return self._error(
                    400,
                    "idempotency_error",
                    "Keys for idempotent requests can only be used with the same parameters "
                    "they were first used with.",
                )
            return web.json_response(first_response, headers={"Idempotent-Replayed": "true"})
        if self._refusal is not None:
            (code, message, param), self._refusal = self._refusal, None
            return self._error(400, "invalid_request_error", message, code, param)
        if (refused := self._beyond_payment(params)) is not None:
            return refused
        refund: dict[str, Any] = {
            "id": f"re_fake_{next(self._ids)}",
            "object": "refund",
            "amount": int(params["amount"]),
            "currency": "usd",
            "payment_intent": params["payment_intent"],
            "reason": params.get("reason"),
            "status": "succeeded",
            "created": int(time.time()),
            "metadata": {
                k.removeprefix("metadata[").removesuffix("]"): v
                for k, v in params.items()
                if k.startswith("metadata[")
            },
        }
        self.refunds[refund["id"]] = refund
        if key:
            self._by_key[key] = (params, refund)
        return web.json_response(refund)

    def _beyond_payment(self, params: dict[str, str]) -> web.Response | None:
        intent = self.payment_intents.get(params["payment_intent"])
        if intent is None:
            return None  # a PaymentIntent made elsewhere: this fake does not know its amount
        refunded = sum(
            r["amount"] for r in self.refunds.values() if r["payment_intent"] == intent["id"]
        )
        if refunded >= intent["amount"]:
            return self._error(
                400,
                "invalid_request_error",
                f"Charge ch_fake_{intent['id']} has already been refunded.",
                "charge_already_refunded",
            )
        if refunded + int(params["amount"]) > intent["amount"]:
            return self._error(
                400,
                "invalid_request_error",
                f"Refund amount (${int(params['amount']) / 100:.2f}) is greater than unrefunded "
                f"amount on charge (${(intent['amount'] - refunded) / 100:.2f})",
                param="amount",
            )
        return None

    async def _payment_intent(self, request: web.Request) -> web.Response:
        params = await _form(request)
        key = request.headers.get("Idempotency-Key")
        self.requests.append(RecordedRequest("POST", request.path, params, key))
        if not self._authorized(request):
            return self._error(401, "invalid_request_error", "Invalid API Key provided")
        if key and key in self._by_key:
            return web.json_response(self._by_key[key][1], headers={"Idempotent-Replayed": "true"})
        intent: dict[str, Any] = {
            "id": f"pi_fake_{next(self._ids)}",
            "object": "payment_intent",
            "amount": int(params["amount"]),
            "currency": params["currency"],
            "status": "succeeded" if params.get("confirm") == "true" else "requires_confirmation",
            "payment_method": params.get("payment_method"),
        }
        self.payment_intents[intent["id"]] = intent
        if key:
            self._by_key[key] = (params, intent)
        return web.json_response(intent)

    async def _list(self, request: web.Request) -> web.Response:
        self.requests.append(RecordedRequest("GET", request.path, dict(request.query), None))
        if not self._authorized(request):
            return self._error(401, "invalid_request_error", "Invalid API Key provided")
        wanted = request.query.get("payment_intent")
        data = [r for r in self.refunds.values() if wanted in (None, r["payment_intent"])]
        return web.Response(
            text=json.dumps(
                {"object": "list", "data": data, "has_more": False, "url": "/v1/refunds"}
            ),
            content_type="application/json",
        )
