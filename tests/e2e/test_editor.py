"""The Neovim plug-in (ops/editors/nvim), headless, against the live gateway: the first
keystroke posts a hint, a pause a progressive one, and <C-s>'s request uses it."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from testsupport.process import RunningGateway, start_gateway

PLUGIN = Path(__file__).resolve().parents[2] / "ops" / "editors" / "nvim"
pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        shutil.which("nvim") is None or shutil.which("curl") is None,
        reason="Debian's neovim (and curl) are not installed (make test installs neovim as "
        "root with apt; else: apt-get install neovim)",
    ),
]

DRIVER = """
vim.opt.rtp:append(%(plugin)s)
local onemac = require("onemac")
onemac.setup({ url = %(url)s, model = "default", max_tokens = 8, pause_ms = 300 })
local buf = onemac.open()
local result = {}
-- Typing, as Neovim reports it to the plug-in: the first keystroke, then more words.
vim.api.nvim_buf_set_lines(buf, 3, 4, false, { "What is" })
vim.cmd("doautocmd TextChangedI")
vim.api.nvim_buf_set_lines(buf, 3, 4, false, { "What is the capital city of France and why " })
vim.cmd("doautocmd TextChangedI")
local state = nil
result.ready = vim.wait(60000, function()
  -- Both hints answered (the second supersedes the first), then the latest one ready.
  if onemac.state.hints_accepted >= 2 then
    onemac.hint_state(function(view) state = view end)
  end
  return state ~= nil and state.state == "ready" and state.id == onemac.state.hint.id
end, 300)
result.hints_posted = onemac.state.hints_posted
result.hint_id = onemac.state.hint and onemac.state.hint.id
vim.api.nvim_feedkeys(vim.api.nvim_replace_termcodes("<C-s>", true, false, true), "x", false)
result.answered = vim.wait(120000, function() return onemac.state.last_answer ~= nil end, 100)
result.answer = onemac.state.last_answer
result.usage = onemac.state.last_usage
result.buffer = vim.api.nvim_buf_get_lines(buf, 0, -1, false)
local out = io.open(%(out)s, "w")
out:write(vim.fn.json_encode(result))
out:close()
vim.cmd("qa!")
"""


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningGateway]:
    running = start_gateway(tmp_path_factory.mktemp("editor"))
    yield running
    running.stop()


def test_the_neovim_plugin_posts_a_hint_that_the_request_uses(
    gw: RunningGateway, tmp_path: Path
) -> None:
    out = tmp_path / "result.json"
    script = tmp_path / "drive.lua"
    script.write_text(
        DRIVER
        % {
            "plugin": json.dumps(str(PLUGIN)),
            "url": json.dumps(gw.base_url),
            "out": json.dumps(str(out)),
        }
    )
    subprocess.run(
        ["nvim", "--headless", "--clean", "-u", "NONE", "-c", f"luafile {script}"],
        check=True,
        timeout=240,
        capture_output=True,
    )
    result = json.loads(out.read_text())
    assert result["hints_posted"] >= 2 and result["ready"], result
    assert result["answered"] and result["answer"], result
    assert "### assistant" in result["buffer"]
    state = httpx.get(f"{gw.base_url}/v1/typing/{result['hint_id']}", timeout=10).json()
    assert state["state"] == "used"
    cached = result["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert cached >= state["prefix_tokens"] - 4
