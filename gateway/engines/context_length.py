"""Does a request fit the model's context? One rule and one error for every path.

The rule is OpenAI's: the prompt's tokens and the completion's must fit the context, and
the refusal is a 400 with ``code: context_length_exceeded`` whose ``param`` names the field
to shorten: the prompt's (``messages``, ``input[3]``) when the prompt alone leaves no room
for the completion's first token, else the completion's (``max_tokens``,
``max_output_tokens``). Chat, legacy completions, typing hints and embeddings all ask here,
whether they count tokens or, before tokenizing a huge text, a lower bound of them.
"""

from __future__ import annotations

from gateway.errors import ContextLengthExceededError


def check_context_length(
    context: int,
    prompt_tokens: int,
    completion_tokens: int = 1,
    *,
    prompt_param: str = "messages",
    completion_param: str = "max_tokens",
    at_least: bool = False,
) -> None:
    """Refuse a request whose ``prompt_tokens`` and ``completion_tokens`` exceed ``context``.

    ``completion_tokens`` is what the request asks to generate: a chat that names no
    ``max_tokens`` still needs one token of room; an embedding needs none (0).
    ``at_least``: ``prompt_tokens`` is a lower bound (a text refused before it is tokenized).
    """
    if prompt_tokens + completion_tokens <= context:
        return
    prompt_too_long = prompt_tokens + min(completion_tokens, 1) > context
    where = "the messages" if prompt_param == "messages" else prompt_param
    bound = "at least " if at_least else ""
    if completion_tokens:
        asked = (
            f"{bound}{prompt_tokens + completion_tokens} tokens ({bound}{prompt_tokens} in "
            f"{where}, {completion_tokens} in the completion)"
        )
    else:
        asked = f"{bound}{prompt_tokens} tokens in {where}"
    raise ContextLengthExceededError(
        f"This model's maximum context length is {context} tokens. However, you requested "
        f"{asked}. Please reduce the length of {where}"
        f"{'' if prompt_too_long else ' or completion'}.",
        param=prompt_param if prompt_too_long else completion_param,
    )
