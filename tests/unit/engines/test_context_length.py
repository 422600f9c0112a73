"""The one context-length rule: which request fits, and which field the refusal names."""

from __future__ import annotations

import pytest

from gateway.engines.context_length import check_context_length
from gateway.errors import ContextLengthExceededError


def refusal(*args: int, **kwargs: object) -> ContextLengthExceededError:
    with pytest.raises(ContextLengthExceededError) as caught:
        check_context_length(*args, **kwargs)  # type: ignore[arg-type]
    return caught.value


def test_a_prompt_that_leaves_room_for_the_completion_fits() -> None:
    check_context_length(100, 99)  # one token of room for the answer
    check_context_length(100, 60, 40)
    check_context_length(100, 100, 0)  # an embedding needs no room


def test_a_prompt_with_no_room_for_a_first_token_names_the_messages() -> None:
    error = refusal(100, 100)
    assert (error.param, error.code) == ("messages", "context_length_exceeded")
    assert error.status_code == 400
    assert "100 in the messages, 1 in the completion" in error.message


def test_a_completion_too_long_names_the_completion_field() -> None:
    error = refusal(8192, 10, 9000, completion_param="max_completion_tokens")
    assert error.param == "max_completion_tokens"
    assert "8192" in error.message and "9010 tokens" in error.message
    assert "or completion" in error.message


def test_an_input_over_the_context_names_the_input() -> None:
    error = refusal(100, 101, 0, prompt_param="input[3]")
    assert error.param == "input[3]"
    assert "101 tokens in input[3]" in error.message


def test_a_lower_bound_says_so() -> None:
    error = refusal(100, 250, 0, at_least=True)
    assert "at least 250 tokens in the messages" in error.message
