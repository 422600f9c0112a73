"""``/v1/typing`` (gateway extension): typing hints that pre-prefill a conversation."""

from __future__ import annotations

from litestar import Controller, delete, get, post
from litestar.di import NamedDependency
from litestar.params import FromPath, JSONBody

from gateway.protocol.hints import TypingHint, TypingHintRequest
from gateway.routes.errors import ERROR_RESPONSES
from gateway.serving.hints import HintService


class HintController(Controller):
    path = "/v1/typing"
    tags = ["Typing hints (gateway extension)"]

    @post(
        "",
        status_code=202,
        summary="Post a typing hint: pre-compute the KV cache of the conversation so far",
        responses=ERROR_RESPONSES,
    )
    async def create(
        self, data: JSONBody[TypingHintRequest], typing: NamedDependency[HintService]
    ) -> TypingHint:
        return (await typing.post(data)).view()

    @get("/{hint_id:str}", summary="A typing hint's state", responses=ERROR_RESPONSES)
    async def retrieve(
        self, hint_id: FromPath[str], typing: NamedDependency[HintService]
    ) -> TypingHint:
        return typing.get(hint_id).view()

    @delete(
        "/{hint_id:str}",
        status_code=200,
        summary="Abort a typing hint (its pre-prefill stops)",
        responses=ERROR_RESPONSES,
    )
    async def abort(
        self, hint_id: FromPath[str], typing: NamedDependency[HintService]
    ) -> TypingHint:
        return typing.abort(hint_id).view()
