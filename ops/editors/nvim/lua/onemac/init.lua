-- onemac-gateway for Neovim (0.7+): a chat buffer that posts typing hints while you type.
--
-- :OnemacChat opens a chat buffer. It is plain text in sections:
--   ### system
--   You are a helpful assistant.
--   ### user
--   (what you are typing)
-- The first keystroke of a new message posts a typing hint with the conversation so far;
-- each pause posts a progressive hint with the draft; <C-s> (or :OnemacSend) sends the
-- message as a chat completion of the same session, so the gateway can use the warm cache,
-- and appends the answer. Requests go through curl.
local M = {}

M.config = {
  url = "http://127.0.0.1:8000",
  model = nil, -- default: the gateway's default tier
  api_key = os.getenv("GATEWAY_API_KEY"),
  pause_ms = 600, -- a pause this long posts a progressive hint
  max_tokens = 512,
}
M.state = {
  hint = nil, hints_posted = 0, hints_accepted = 0, last_answer = nil, last_usage = nil, busy = false,
}
local session = "nvim-" .. tostring(vim.loop.hrtime())
local timer = nil
local typing = false -- a hint was posted for the message being typed

local function headers()
  local args = { "-H", "content-type: application/json" }
  if M.config.api_key and M.config.api_key ~= "" then
    table.insert(args, "-H")
    table.insert(args, "authorization: Bearer " .. M.config.api_key)
  end
  return args
end

-- POST (or GET when body is nil) through curl; on_done(decoded_json or nil, raw)
local function request(path, body, on_done)
  local args = { "curl", "-sS", "-X", body and "POST" or "GET", M.config.url .. path }
  vim.list_extend(args, headers())
  if body then
    vim.list_extend(args, { "--data-binary", "@-" })
  end
  local out = {}
  local job = vim.fn.jobstart(args, {
    stdout_buffered = true,
    on_stdout = function(_, data) out = data end,
    on_exit = function()
      local raw = table.concat(out, "\n")
      local ok, decoded = pcall(vim.fn.json_decode, raw)
      vim.schedule(function() on_done(ok and decoded or nil, raw) end)
    end,
  })
  if body then
    vim.fn.chansend(job, vim.fn.json_encode(body))
    vim.fn.chanclose(job, "stdin")
  end
  return job
end

-- The buffer as messages: every "### role" section; the last user section is the draft.
function M.parse(bufnr)
  local messages, role, lines = {}, nil, {}
  local function flush()
    if role then
      table.insert(messages, { role = role, content = vim.trim(table.concat(lines, "\n")) })
    end
  end
  for _, line in ipairs(vim.api.nvim_buf_get_lines(bufnr or 0, 0, -1, false)) do
    local header = line:match("^###%s+(%a+)%s*$")
    if header then
      flush()
      role, lines = header, {}
    elseif role then
      table.insert(lines, line)
    end
  end
  flush()
  local draft = ""
  if #messages > 0 and messages[#messages].role == "user" then
    draft = table.remove(messages).content
  end
  return messages, draft
end

function M.post_hint(bufnr)
  local messages, draft = M.parse(bufnr)
  if #messages == 0 then return end
  M.state.hints_posted = M.state.hints_posted + 1
  request("/v1/typing", { model = M.config.model, messages = messages, session = session, draft = draft },
    function(hint)
      if hint and hint.id then
        M.state.hint = hint
        M.state.hints_accepted = M.state.hints_accepted + 1
      end
    end)
end

-- Called on every change in the chat buffer: the first keystroke of a message posts a hint
-- at once; later ones (re)start the pause timer for a progressive hint.
function M.on_change(bufnr)
  bufnr = bufnr or vim.api.nvim_get_current_buf()
  if not typing then
    typing = true
    M.post_hint(bufnr)
    return
  end
  if timer then timer:stop() end
  timer = vim.loop.new_timer()
  timer:start(M.config.pause_ms, 0, vim.schedule_wrap(function() M.post_hint(bufnr) end))
end

function M.hint_state(on_done)
  if not M.state.hint then return on_done(nil) end
  request("/v1/typing/" .. M.state.hint.id, nil, function(view) on_done(view) end)
end

function M.send(bufnr)
  bufnr = bufnr or vim.api.nvim_get_current_buf()
  if timer then timer:stop() end
  local messages, draft = M.parse(bufnr)
  if draft == "" then return end
  table.insert(messages, { role = "user", content = draft })
  M.state.busy = true
  request("/v1/chat/completions", {
    model = M.config.model or "default", messages = messages, session = session,
    max_tokens = M.config.max_tokens,
  }, function(reply, raw)
    M.state.busy = false
    typing = false
    local text
    if reply and reply.choices then
      text = reply.choices[1].message.content or ""
      M.state.last_usage = reply.usage
    else
      text = "[error] " .. raw
    end
    M.state.last_answer = text
    local lines = { "### assistant" }
    vim.list_extend(lines, vim.split(text, "\n", { plain = true }))
    vim.list_extend(lines, { "### user", "" })
    vim.api.nvim_buf_set_lines(bufnr, -1, -1, false, lines)
  end)
end

function M.open()
  vim.cmd("enew")
  local bufnr = vim.api.nvim_get_current_buf()
  vim.bo[bufnr].buftype = "nofile"
  vim.bo[bufnr].filetype = "markdown"
  vim.api.nvim_buf_set_name(bufnr, "onemac-chat-" .. bufnr)
  vim.api.nvim_buf_set_lines(bufnr, 0, -1, false,
    { "### system", "You are a helpful assistant.", "### user", "" })
  vim.api.nvim_create_autocmd({ "TextChanged", "TextChangedI" }, {
    buffer = bufnr, callback = function() M.on_change(bufnr) end,
  })
  vim.keymap.set({ "n", "i" }, "<C-s>", function() M.send(bufnr) end, { buffer = bufnr })
  return bufnr
end

function M.setup(opts)
  M.config = vim.tbl_extend("force", M.config, opts or {})
  vim.api.nvim_create_user_command("OnemacChat", function() M.open() end, {})
  vim.api.nvim_create_user_command("OnemacSend", function() M.send() end, {})
end

return M
