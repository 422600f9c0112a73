"""The Responses store on a failing disk, through the openai SDK (issue 35): a gateway whose
store file is damaged starts, keeps the damaged file aside and stores anew; one whose store
cannot be opened still answers every request, returns a ``store: true`` response it could
not keep (nothing accepted is lost) and says 503 ``store_unavailable`` where the store is
needed, never a 500."""

from __future__ import annotations

from pathlib import Path

import openai
import pytest

from testsupport.process import start_gateway

MODEL = "smollm2-135m-instruct"
pytestmark = pytest.mark.e2e


def test_a_damaged_store_file_is_moved_aside_and_the_gateway_stores_anew(tmp_path: Path) -> None:
    store = tmp_path / "responses.sqlite3"
    store.write_bytes(b"SQLite format 3\x00" + b"\xff" * 8192)
    gateway = start_gateway(tmp_path / "gw", {"responses": {"path": str(store)}})
    try:
        client = gateway.openai()
        first = client.responses.create(model=MODEL, input="Say hi.", max_output_tokens=8)
        again = client.responses.retrieve(first.id)
        assert again.id == first.id and again.output_text == first.output_text
        follow = client.responses.create(
            model=MODEL, input="Again.", previous_response_id=first.id, max_output_tokens=8
        )
        assert follow.status in ("completed", "incomplete")
    finally:
        gateway.stop()
    assert len(list(tmp_path.glob("responses.sqlite3.damaged-*"))) == 1
    assert "is damaged" in gateway.log()


def test_a_store_that_cannot_be_opened_loses_no_answer_and_is_a_503(tmp_path: Path) -> None:
    store = tmp_path / "responses.sqlite3"
    store.mkdir()  # (root writes a read-only file anyway: a folder cannot be opened)
    gateway = start_gateway(tmp_path / "gw", {"responses": {"path": str(store)}})
    try:
        client = gateway.openai()
        chat = client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "Hi"}], max_tokens=4
        )
        assert chat.choices[0].message.content is not None
        kept = client.responses.create(model=MODEL, input="Say hi.", max_output_tokens=8)
        assert kept.output_text  # answered, though it could not be stored
        with pytest.raises(openai.APIStatusError) as refused:
            client.responses.retrieve(kept.id)
        assert refused.value.status_code == 503
        error = refused.value.body
        assert isinstance(error, dict) and error["code"] == "store_unavailable"
        assert str(store) in error["message"]
        with pytest.raises(openai.APIStatusError) as chained:
            client.responses.create(model=MODEL, input="More.", previous_response_id=kept.id)
        assert chained.value.status_code == 503
        assert "Traceback" not in gateway.log()
    finally:
        gateway.stop()
