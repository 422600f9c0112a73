"""Task types run through the chat service on a fake backend: the catalogue's checks and
prompts, the task's own sampling and grammar, thinking split from the output, a result out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gateway.errors import NotFoundError, UnprocessableError
from gateway.protocol.openai import MAX_STOP_SEQUENCES
from gateway.protocol.tasks import TaskRunRequest
from gateway.seam.backend import Priority, SamplingParams, TicketSpec
from gateway.serving.tasks import sampling_arguments
from tests.unit.fake_tasks import make_task_service


def run_request(**args: str) -> TaskRunRequest:
    return TaskRunRequest.model_validate({"args": args})


async def test_a_task_runs_on_its_tier_with_its_prompt_sampling_and_grammar(
    tmp_path: Path,
) -> None:
    service, backends = make_task_service(tmp_path)
    task, prepared = await service.prepare("verdict", run_request(answer="42"))
    result = await service.complete(await service.start(task, prepared))
    sent = backends["slow"].requests[0]
    assert backends["fast"].requests == []
    assert sent.messages == (
        {"role": "system", "content": task.static_text()},
        {"role": "user", "content": "Answer: 42"},
    )
    assert task.static_text().startswith("Judge the answer.") and "<review>" in task.static_text()
    assert sent.priority is Priority.BACKGROUND and sent.params.max_tokens == 200
    assert sent.params.grammar is not None
    assert sent.ticket == TicketSpec("verdict", {"answer": "42"})
    assert result.output == {"ok": True} and result.thinking == "fine"
    assert result.finish_reason == "stop" and result.task_type == "verdict"
    assert result.id.startswith("task-") and result.model == "slow"


async def test_deltas_split_thinking_from_output(tmp_path: Path) -> None:
    service, _ = make_task_service(tmp_path)
    task, prepared = await service.prepare("verdict", run_request(answer="42"))
    run = await service.start(task, prepared)
    deltas = [(d.type, d.delta) async for d in service.deltas(run)]
    assert "".join(t for k, t in deltas if k == "thinking.delta") == "fine"
    assert "".join(t for k, t in deltas if k == "output.delta") == '{"ok": true}'


async def test_json_cut_by_max_tokens_gives_no_output_and_length(tmp_path: Path) -> None:
    service, backends = make_task_service(tmp_path)
    backends["slow"].answer = ("<review>", "hm</review>", '{"ok"')
    backends["slow"].finish = "length"
    task, prepared = await service.prepare("verdict", run_request(answer="42"))
    result = await service.complete(await service.start(task, prepared))
    assert result.output is None and result.finish_reason == "length"


async def test_a_received_ticket_runs_under_its_id_and_is_not_a_ticket_again(
    tmp_path: Path,
) -> None:
    service, backends = make_task_service(tmp_path)
    task, prepared = await service.prepare("verdict", run_request(answer="1"), "chatcmpl-peer7")
    result = await service.complete(await service.start(task, prepared))
    assert backends["slow"].requests[0].ticket is None
    assert result.id == "task-peer7"


async def test_a_chat_task_takes_its_messages_and_sampling_from_arguments(
    tmp_path: Path,
) -> None:
    service, backends = make_task_service(tmp_path)
    messages = [{"role": "user", "content": "Hi"}]
    args = {"messages": json.dumps(messages), "temperature": "0.7"}
    task, prepared = await service.prepare("chat", run_request(**args))
    await service.complete(await service.start(task, prepared))
    sent = backends["fast"].requests[0]  # its tier does not exist here: the default
    assert sent.messages == ({"role": "user", "content": "Hi"},)
    assert sent.params.temperature == 0.7 and sent.params.grammar is None


@pytest.mark.parametrize(
    ("task_id", "args", "param"),
    [
        ("verdict", {"answer": "42", "colour": "red"}, "args.colour"),  # unknown
        ("verdict", {"answer": "x" * 21}, "args.answer"),  # too long
        ("verdict", {"note": "n"}, "args.answer"),  # required, missing
        ("chat", {"messages": "not json"}, "args.messages"),
        ("chat", {"messages": '[{"role": "tool", "content": "x"}]'}, "args.messages"),
        ("chat", {"messages": "[]"}, "args.messages"),
        (
            "chat",
            {"messages": '[{"role": "user", "content": "x"}]', "temperature": "3"},
            "args.temperature",
        ),
    ],
)
async def test_bad_arguments_are_refused_naming_the_argument(
    tmp_path: Path, task_id: str, args: dict[str, str], param: str
) -> None:
    service, backends = make_task_service(tmp_path)
    with pytest.raises(UnprocessableError) as refused:
        await service.prepare(task_id, run_request(**args))
    assert refused.value.param == param
    assert all(b.requests == [] for b in backends.values())


async def test_an_argument_that_is_not_a_string_is_refused(tmp_path: Path) -> None:
    service, _ = make_task_service(tmp_path)
    request = TaskRunRequest.model_validate({"args": {"answer": 42}})
    with pytest.raises(UnprocessableError) as refused:
        await service.prepare("verdict", request)
    assert refused.value.param == "args.answer"


async def test_an_unknown_task_is_not_found_and_the_known_are_named(tmp_path: Path) -> None:
    service, _ = make_task_service(tmp_path)
    with pytest.raises(NotFoundError) as refused:
        await service.prepare("nope", run_request())
    assert refused.value.param == "task_type" and "chat, verdict" in str(refused.value)


def test_the_catalogue_describes_every_task_on_its_tier(tmp_path: Path) -> None:
    service, _ = make_task_service(tmp_path)
    listing = service.prompts.catalogue()
    assert [t.id for t in listing.data] == ["chat", "verdict"]
    verdict = listing.data[1]
    assert verdict.tier == "slow" and verdict.thinking_tag == "review"
    assert [(a.name, a.required, a.max_length) for a in verdict.arguments] == [
        ("answer", True, 20),
        ("note", False, 8000),
    ]
    assert listing.data[0].tier == "fast"
    assert listing.tasks_hash == service.prompts.catalog.hash


def test_a_hint_warms_the_static_part_until_every_required_argument_is_known(
    tmp_path: Path,
) -> None:
    service, _ = make_task_service(tmp_path)
    prompts = service.prompts
    verdict, chat = prompts.get("verdict"), prompts.get("chat")
    assert prompts.hint_messages(verdict, {"note": "n"}) == (
        {"role": "system", "content": verdict.static_text()},
    )
    assert len(prompts.hint_messages(verdict, {"answer": "42"})) == 2
    for args in ({}, {"temperature": "0.5"}):  # no static part to warm, nothing else yet
        with pytest.raises(UnprocessableError) as refused:
            prompts.hint_messages(chat, args)
        assert refused.value.param == "task"


BASE = SamplingParams(max_tokens=100, temperature=0.0, top_p=1.0)


def test_sampling_arguments_set_the_task_s_sampling() -> None:
    args = {"max_tokens": "7", "seed": "3", "top_p": "0.5", "stop": '["\\n", "END"]'}
    args["repetition_penalty"] = "1.1"
    sampling = sampling_arguments({**args, "unrelated": "x"}, BASE)
    assert (sampling.max_tokens, sampling.seed, sampling.top_p) == (7, 3, 0.5)
    assert sampling.repetition_penalty == 1.1
    assert sampling.stop == ("\n", "END") and sampling.temperature == 0.0
    assert sampling_arguments({}, BASE) is BASE


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("max_tokens", "many"),
        ("max_tokens", "0"),
        ("temperature", "nan"),
        ("temperature", "2.5"),
        ("top_p", "-0.1"),
        ("seed", "1.5"),
        ("repetition_penalty", "0"),
        ("repetition_penalty", "inf"),
        ("stop", '"END"'),
        ("stop", "[1]"),
        ("stop", json.dumps(["s"] * (MAX_STOP_SEQUENCES + 1))),
    ],
)
def test_a_malformed_or_out_of_range_sampling_argument_is_refused(name: str, value: str) -> None:
    with pytest.raises(UnprocessableError) as refused:
        sampling_arguments({name: value}, BASE)
    assert refused.value.param == f"args.{name}"
