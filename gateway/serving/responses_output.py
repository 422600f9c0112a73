"""A reply as Responses output items, and the stream events that build them, in order.

Fed the chat service's reply pieces (reasoning, text, the start of a call, fragments of its
arguments), ``OutputBuilder`` keeps the output items and returns the events each piece
causes, numbered by ``sequence_number``. Each item is opened and closed in OpenAI's order::

    reasoning  output_item.added, content_part.added (reasoning_text),
               reasoning_text.delta..., reasoning_text.done, content_part.done, output_item.done
    message    output_item.added, content_part.added (output_text),
               output_text.delta..., output_text.done, content_part.done, output_item.done
    call       output_item.added, function_call_arguments.delta...,
               function_call_arguments.done, output_item.done

A new kind of piece closes the open item; a new call always opens a new item. Streaming and
non-streaming replies go through the same builder (the latter ignore the events), so both
give the same items.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pydantic import BaseModel

from gateway.protocol.responses import new_id
from gateway.protocol.responses_events import (
    ContentPartAddedEvent,
    ContentPartDoneEvent,
    FunctionCallArgumentsDeltaEvent,
    FunctionCallArgumentsDoneEvent,
    FunctionCallOutput,
    ItemStatus,
    OutputItem,
    OutputItemAddedEvent,
    OutputItemDoneEvent,
    OutputMessage,
    OutputTextDeltaEvent,
    OutputTextDoneEvent,
    OutputTextPart,
    ReasoningOutput,
    ReasoningTextDeltaEvent,
    ReasoningTextDoneEvent,
    ReasoningTextPart,
)
from gateway.serving.reasoning import ReasoningPiece
from gateway.serving.tool_calls import CallArguments, CallStart, ReplyPiece, TextPiece


@dataclass
class _Item:
    kind: str  # "reasoning" | "message" | "function_call"
    id: str
    index: int
    text: list[str] = field(default_factory=list)  # text, reasoning or arguments so far
    call_id: str = ""
    name: str = ""
    namespace: str | None = None  # a namespaced function's group (``name`` is then its own)
    done: bool = False
    status: ItemStatus = "completed"  # as it ended

    def item(self, status: ItemStatus) -> OutputItem:
        text = "".join(self.text)
        if self.kind == "reasoning":
            content = [ReasoningTextPart(text=text)] if status != "in_progress" else []
            return ReasoningOutput(id=self.id, content=content, status=status)
        if self.kind == "message":
            parts = [OutputTextPart(text=text)] if status != "in_progress" else []
            return OutputMessage(id=self.id, status=status, content=parts)
        return FunctionCallOutput(
            id=self.id,
            call_id=self.call_id,
            name=self.name,
            namespace=self.namespace,
            arguments=text,
            status=status,
        )


class OutputBuilder:
    """The output items of one reply and the events that stream them."""

    def __init__(self, namespaces: dict[str, tuple[str, str]] | None = None) -> None:
        """``namespaces``: a namespaced function's name as the model wrote it, split back
        into its group and its own name."""
        self.sequence = 0
        self.items: list[_Item] = []
        self.namespaces = namespaces or {}

    def number(self) -> int:
        """The next event's ``sequence_number``."""
        self.sequence += 1
        return self.sequence - 1

    @property
    def _open(self) -> _Item | None:
        last = self.items[-1] if self.items else None
        return last if last is not None and not last.done else None

    def feed(self, piece: ReplyPiece | ReasoningPiece) -> list[BaseModel]:
        if isinstance(piece, ReasoningPiece):
            events = self._ensure("reasoning")
            item = self.items[-1]
            item.text.append(piece.text)
            return [*events, self._delta(item, piece.text)]
        if isinstance(piece, TextPiece):
            events = self._ensure("message")
            item = self.items[-1]
            item.text.append(piece.text)
            return [*events, self._delta(item, piece.text)]
        if isinstance(piece, CallStart):
            events = self.close()
            item = _Item("function_call", new_id("fc"), len(self.items), [], piece.id, piece.name)
            if piece.name in self.namespaces:
                item.namespace, item.name = self.namespaces[piece.name]
            self.items.append(item)
            events.append(self._added(item))
            return events
        assert isinstance(piece, CallArguments)
        item = self.items[-1]
        item.text.append(piece.fragment)
        event = FunctionCallArgumentsDeltaEvent(
            sequence_number=self.number(),
            item_id=item.id,
            output_index=item.index,
            delta=piece.fragment,
        )
        return [event]

    def _ensure(self, kind: str) -> list[BaseModel]:
        current = self._open
        if current is not None and current.kind == kind:
            return []
        events = self.close()
        item = _Item(kind, new_id("rs" if kind == "reasoning" else "msg"), len(self.items))
        self.items.append(item)
        events.append(self._added(item))
        empty = ReasoningTextPart(text="") if kind == "reasoning" else OutputTextPart(text="")
        events.append(
            ContentPartAddedEvent(
                sequence_number=self.number(),
                item_id=item.id,
                output_index=item.index,
                content_index=0,
                part=empty,
            )
        )
        return events

    def _added(self, item: _Item) -> OutputItemAddedEvent:
        return OutputItemAddedEvent(
            sequence_number=self.number(), output_index=item.index, item=item.item("in_progress")
        )

    def _delta(self, item: _Item, text: str) -> BaseModel:
        common = {"item_id": item.id, "output_index": item.index, "content_index": 0}
        if item.kind == "reasoning":
            return ReasoningTextDeltaEvent(sequence_number=self.number(), delta=text, **common)
        return OutputTextDeltaEvent(sequence_number=self.number(), delta=text, **common)

    def close(self, status: ItemStatus = "completed") -> list[BaseModel]:
        """Close the open item (``status`` it ends with); the events that say so."""
        item = self._open
        if item is None:
            return []
        item.done = True
        text = "".join(item.text)
        events: list[BaseModel] = []
        common = {"item_id": item.id, "output_index": item.index}
        if item.kind == "function_call":
            events.append(
                FunctionCallArgumentsDoneEvent(
                    sequence_number=self.number(), name=item.name, arguments=text, **common
                )
            )
        else:
            if item.kind == "reasoning":
                events.append(
                    ReasoningTextDoneEvent(
                        sequence_number=self.number(), content_index=0, text=text, **common
                    )
                )
                part: ReasoningTextPart | OutputTextPart = ReasoningTextPart(text=text)
            else:
                events.append(
                    OutputTextDoneEvent(
                        sequence_number=self.number(), content_index=0, text=text, **common
                    )
                )
                part = OutputTextPart(text=text)
            events.append(
                ContentPartDoneEvent(
                    sequence_number=self.number(), content_index=0, part=part, **common
                )
            )
        item.status = status
        events.append(
            OutputItemDoneEvent(
                sequence_number=self.number(), output_index=item.index, item=item.item(status)
            )
        )
        return events

    def finish(self, complete_calls: set[str], incomplete: bool) -> list[BaseModel]:
        """Close the reply: the last item ends incomplete when the reply was cut (a call is
        complete only if the parser saw its end). A reply with no item at all gets an empty
        message, so the response always says something."""
        events: list[BaseModel] = []
        if not self.items:
            events.extend(self._ensure("message"))
        last = self._open
        cut = incomplete or (
            last is not None and last.kind == "function_call" and last.call_id not in complete_calls
        )
        events.extend(self.close("incomplete" if cut else "completed"))
        return events

    def output(self) -> list[OutputItem]:
        """The items as the final response lists them."""
        return [item.item(item.status) for item in self.items]
