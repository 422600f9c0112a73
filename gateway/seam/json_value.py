"""The type of a JSON value, as the seam and the serving layer hold one.

Chat messages, tool schemas, tool-call arguments and stored responses are JSON: this names
that shape once (``JSONValue``, ``JSONObject``) so nothing at the seam or in ``serving/``
is left untyped. Values are narrowed with ``isinstance`` where they are read. Where a library
hands back an untyped value (``json.loads``, pydantic's ``model_dump``), the result is
assigned to one of these names at that boundary.
"""

from __future__ import annotations

from typing import TypeAlias

JSONValue: TypeAlias = "str | int | float | bool | list[JSONValue] | dict[str, JSONValue] | None"
JSONObject: TypeAlias = "dict[str, JSONValue]"
