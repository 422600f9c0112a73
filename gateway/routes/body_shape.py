"""A big body's shape bounded before it is built: counted slice by slice, never decoded whole.

Decoding a body whole (``json.loads``, or the route's msgspec decoder) is one C call that
holds the GIL from the first byte to the last and builds every object in it: a
40,000-message conversation (2.1 MB) took 15-60 ms and 40,000 dicts for the garbage
collector, and eight of them at once stalled ``/health`` for 1.12 s although a worker thread
did the work and every one was refused. Here a body is walked as ``msgspec.Raw`` slices
instead: an object is split into its members, an array of objects or arrays is counted
element by element without building them (an unparsed slice: ~50 ns, nothing for the
collector to track), and the bound refuses an over-long array before anything in it is
built: that conversation is refused after ~3 ms. Only slices under ``DECODE_WHOLE_BYTES``,
and arrays of numbers or strings (cheaper to build than to slice), are decoded whole, then
walked by ``check_shape``. So no one C call runs over more than one slice, and between
slices the Python loop lets the event loop take the GIL (every 5 ms at most).

The bounds and the names of the fields are ``gateway.protocol.bounds``': the same error,
with the same words, as the walk over a decoded body.
"""

from __future__ import annotations

import msgspec

from gateway.protocol.bounds import (
    MAX_ARRAY_ITEMS,
    bound_of,
    check_length,
    check_shape,
    child_name,
)

# A slice this small decodes whole in well under a millisecond.
DECODE_WHOLE_BYTES = 64 * 1024
MAX_DEPTH = 64  # as check_shape's: deeper nesting is the route decoder's to refuse
_CONTAINERS = (b"{", b"[")
_WHITESPACE = b" \t\r\n"
_PEEK_BYTES = 64

_members = msgspec.json.Decoder(dict[str, msgspec.Raw])
_elements = msgspec.json.Decoder(list[msgspec.Raw])
_whole = msgspec.json.Decoder()


def check_body_shape(body: bytes) -> None:
    """Raise ``ShapeError`` at the first array longer than its bound. A body that is not
    JSON, or nested too deeply, passes: the route's own decoder refuses it in its own words
    (400, or ``json_too_deep``)."""
    try:
        _check(body, "", MAX_ARRAY_ITEMS, 0)
    except (msgspec.DecodeError, RecursionError):
        return


def _check(raw: bytes | msgspec.Raw, name: str, limit: int, depth: int) -> None:
    """Bound the JSON value ``raw`` found at ``name`` (``limit``: its bound if an array)."""
    if depth > MAX_DEPTH:
        return
    head = _peek(raw)
    kind = head[:1]
    if kind not in _CONTAINERS:
        return  # a string or a number: no array in it
    if len(raw) < DECODE_WHOLE_BYTES or (kind == b"[" and not _holds_containers(head)):
        value = _whole.decode(raw)
        if isinstance(value, list):
            check_length(name, len(value), limit)
        check_shape(value, name, depth, MAX_DEPTH)
    elif kind == b"{":
        for key, member in _members.decode(raw).items():
            _check(member, child_name(name, key), bound_of(key), depth + 1)
    else:
        elements = _elements.decode(raw)
        check_length(name, len(elements), limit)
        for index, element in enumerate(elements):
            _check(element, child_name(name, index), MAX_ARRAY_ITEMS, depth + 1)


def _peek(raw: bytes | msgspec.Raw) -> bytes:
    """The first bytes of ``raw`` (a slice is never copied whole), whitespace dropped."""
    return bytes(memoryview(raw)[:_PEEK_BYTES]).lstrip(_WHITESPACE)


def _holds_containers(head: bytes) -> bool:
    """Whether an array's first element (in the peeked ``head``) is an object or array."""
    first = head[1:].lstrip(_WHITESPACE)[:1]
    # Past the peek (64 bytes of whitespace) it is counted slice by slice: safe either way.
    return first in _CONTAINERS or not first
