"""Anthropic's message threads: a conversation kept on the server, continued by a reply's id.

Current Anthropic SDKs (and their tool runners, by default) send the first turn with
``thread: {"type": "create"}`` and each later turn with only its new messages and
``thread: {"type": "continue", "previous_message_id": "msg_..."}``, without ``system`` and
``tools``, which the server takes from the thread. Each threaded turn is stored as a row of
the conversations' SQLite file (``ResponseStore``, table ``message_threads``, the same
retention as stored responses): the turn's own messages, the reply, and the system prompt
and tools where the turn gave them. A continued turn is the chain of its rows read back,
then its own messages.

A thread that is not stored (never made, pruned, or its file replaced) is answered with 404
and ``error.details.error_code: "thread_not_found"``: the SDKs then replay the whole
conversation with a new thread, on their own. Unlike Anthropic's API, a reply may be
continued more than once (a conversation may branch), and a continued turn may give its own
``system`` or ``tools`` (they replace the thread's from that turn on).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

from pydantic import TypeAdapter, ValidationError

from gateway.errors import InvalidRequestError, NotFoundError
from gateway.protocol.anthropic import (
    Message,
    MessageParam,
    MessagesRequest,
    ThreadContinue,
    Tool,
)
from gateway.protocol.openai import shorten
from gateway.seam.json_value import JSONObject, JSONValue
from gateway.serving.response_store import (
    BrokenChainError,
    ResponseStore,
    StoredResponse,
    StoreUnavailableError,
)

log = logging.getLogger(__name__)
THREAD_NOT_FOUND = "thread_not_found"
_MESSAGES = TypeAdapter(list[MessageParam])
_TOOLS = TypeAdapter(list[Tool])


class ThreadNotFoundError(NotFoundError):
    code = THREAD_NOT_FOUND


class MessageThreads:
    """Stored threads: a continued request made whole, and each threaded turn kept."""

    def __init__(self, store: ResponseStore) -> None:
        self.store = store

    async def whole(self, request: MessagesRequest) -> MessagesRequest:
        """The request as the model sees it: a continued thread's stored turns first, its
        system prompt and tools where the request gives none (unthreaded: as it is)."""
        thread = request.thread
        if not isinstance(thread, ThreadContinue):
            return request
        chain = await self._chain(thread.previous_message_id)
        try:
            messages, system, tools = _read_back(chain)
        except (ValidationError, KeyError, TypeError) as exc:
            # A row this version cannot read (damaged, or another version's): as if it were
            # gone, so that the SDK replays the conversation rather than the client failing.
            log.warning("thread of %s unreadable: %s", thread.previous_message_id, exc)
            raise ThreadNotFoundError(
                f"The thread of message '{shorten(thread.previous_message_id)}' cannot be "
                "read back.",
                param="thread.previous_message_id",
            ) from None
        whole = request.model_copy(
            update={
                "messages": [*messages, *request.messages],
                "system": request.system if request.system is not None else system,
                "tools": request.tools if request.tools is not None else tools,
            }
        )
        _check_tool_choice(whole)
        return whole

    async def keep(self, request: MessagesRequest, message: Message) -> None:
        """Store a threaded turn (its own messages, the reply) under the reply's id."""
        thread = request.thread
        if thread is None:
            return
        turn: JSONObject = {"reply": [block.model_dump(mode="json") for block in message.content]}
        if request.system is not None:
            turn["system"] = (
                request.system
                if isinstance(request.system, str)
                else [block.model_dump(mode="json") for block in request.system]
            )
        if request.tools is not None:
            turn["tools"] = [tool.model_dump(mode="json") for tool in request.tools]
        previous = thread.previous_message_id if isinstance(thread, ThreadContinue) else None
        stored = StoredResponse(
            id=message.id,
            created_at=time.time(),
            previous_id=previous,
            response=turn,
            input_items=[m.model_dump(mode="json") for m in request.messages],
        )
        try:
            await self.store.put(stored)
        except StoreUnavailableError as exc:  # a full disk must not lose the reply itself
            log.error("message %s: its thread turn is not stored: %s", message.id, exc)

    async def _chain(self, message_id: str) -> Sequence[StoredResponse]:
        try:
            chain = await self.store.conversation(message_id)
        except BrokenChainError as exc:
            raise ThreadNotFoundError(
                f"The thread of message '{shorten(message_id)}' continues "
                f"'{shorten(exc.missing)}', which is no longer stored.",
                param="thread.previous_message_id",
            ) from None
        if not chain:
            raise ThreadNotFoundError(
                f"No thread ends at message '{shorten(message_id)}' (never created, or no "
                "longer stored).",
                param="thread.previous_message_id",
            )
        return chain


def _read_back(
    chain: Sequence[StoredResponse],
) -> tuple[list[MessageParam], JSONValue, list[Tool] | None]:
    """A stored thread's messages (each turn's, then its reply), and its latest system
    prompt and tools."""
    messages: list[MessageParam] = []
    system: JSONValue = None
    tools: list[Tool] | None = None
    for row in chain:
        messages.extend(_MESSAGES.validate_python(row.input_items))
        reply = row.response["reply"]
        messages.append(MessageParam.model_validate({"role": "assistant", "content": reply}))
        system = row.response.get("system", system)
        if row.response.get("tools") is not None:
            tools = _TOOLS.validate_python(row.response["tools"])
    return messages, system, tools


def _check_tool_choice(request: MessagesRequest) -> None:
    choice = request.tool_choice
    names = {tool.name for tool in request.tools or ()}
    if choice is not None and choice.type == "tool" and choice.name not in names:
        raise InvalidRequestError(
            f"tool_choice names an unknown tool {shorten(choice.name or '')!r}",
            param="tool_choice",
        )
