// The playground: a chat that streams, posts typing hints while you type, and shows what
// they buy (time to first token, cached tokens) next to the slot, the queues and the gates.
"use strict";

const $ = (id) => document.getElementById(id);
const session = "playground-" + Math.random().toString(36).slice(2, 10);
const history = [];
let hint = null;        // the latest hint: {id, state}
let hintTimer = null;   // debounce of progressive hints
let lastDraftWords = -1;
let answers = 0;

$("apikey").value = localStorage.getItem("onemac-api-key") || "";
$("apikey").addEventListener("change", () => localStorage.setItem("onemac-api-key", $("apikey").value));

function headers() {
  const h = { "content-type": "application/json" };
  const key = $("apikey").value.trim();
  if (key) h.authorization = "Bearer " + key;
  return h;
}

async function api(path, options = {}) {
  const response = await fetch(path, { ...options, headers: headers() });
  if (!response.ok) {
    const body = await response.json().catch(() => ({}));
    throw new Error((body.error && body.error.message) || response.statusText);
  }
  return response;
}

async function loadModels() {
  try {
    const models = await (await api("/v1/models")).json();
    const select = $("model");
    select.innerHTML = "";
    const seen = new Set();
    for (const m of models.data) {
      if (seen.has(m.tier)) continue;   // one entry per tier
      seen.add(m.tier);
      const option = document.createElement("option");
      option.value = m.id;
      option.textContent = `${m.id} (${m.kind}${m.loaded ? "" : ", not loaded"})`;
      select.appendChild(option);
    }
  } catch (error) {
    $("hintstate").textContent = "models: " + error.message;
  }
}

function showHint(state) {
  const badge = $("hintstate");
  badge.dataset.state = state;
  badge.textContent = "hint: " + state;
}

// Typing hints: the first keystroke posts the conversation so far; each new whole word
// posts a progressive hint with the draft (debounced), superseding the previous one.
function onDraftInput() {
  if (!$("hints").checked) return;
  const draft = $("draft").value;
  const words = draft.trim() ? draft.trim().split(/\s+/).length : 0;
  const endsWord = /\s$/.test(draft);
  if (hint && words === lastDraftWords && !endsWord) return;
  clearTimeout(hintTimer);
  hintTimer = setTimeout(() => postHint(draft, words), hint ? 250 : 0);
}

async function postHint(draft, words) {
  lastDraftWords = words;
  const messages = history.length ? history.slice() : [{ role: "system", content: "You are a helpful assistant." }];
  try {
    const response = await api("/v1/typing", {
      method: "POST",
      body: JSON.stringify({ model: $("model").value, messages, session, draft }),
    });
    hint = await response.json();
    showHint(hint.state);
    followHint(hint.id);
  } catch (error) {
    showHint("error: " + error.message);
  }
}

async function followHint(id) {
  while (hint && hint.id === id && ["queued", "computing"].includes(hint.state)) {
    await new Promise((r) => setTimeout(r, 200));
    try {
      const view = await (await api("/v1/typing/" + id)).json();
      if (hint && hint.id === id) { hint = view; showHint(view.state); }
    } catch (error) { return; }
  }
}

function addMessage(role, text) {
  const div = document.createElement("div");
  div.className = "msg " + role;
  div.textContent = text;
  $("transcript").appendChild(div);
  $("transcript").scrollTop = $("transcript").scrollHeight;
  return div;
}

async function send(event) {
  if (event) event.preventDefault();
  const text = $("draft").value.trim();
  if (!text) return;
  $("draft").value = "";
  clearTimeout(hintTimer);
  const usedHint = $("hints").checked ? hint : null;
  if (!history.length) history.push({ role: "system", content: "You are a helpful assistant." });
  history.push({ role: "user", content: text });
  addMessage("user", text);
  const bubble = addMessage("assistant", "");
  const answerText = document.createElement("span");
  const meta = document.createElement("div");
  meta.className = "meta";
  bubble.append(answerText, meta);
  const started = performance.now();
  let firstAt = null, tokens = 0, usage = null, answer = "";
  let hintOutcome = usedHint ? "…" : "off";
  const showMeta = (suffix) => {
    const ttft = firstAt === null ? "-" : ((firstAt - started) / 1000).toFixed(2) + " s";
    meta.textContent = `TTFT ${ttft} · hint ${hintOutcome}${suffix}`;
    meta.dataset.hint = hintOutcome;
  };
  try {
    const response = await api("/v1/chat/completions", {
      method: "POST",
      body: JSON.stringify({
        model: $("model").value, messages: history, stream: true,
        max_tokens: Number($("maxtokens").value) || undefined,
        stream_options: { include_usage: true }, session: usedHint ? session : undefined,
      }),
    });
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      // Server-Sent Events may end lines with \r\n (Litestar does): normalize first.
      buffer += decoder.decode(value, { stream: true }).replace(/\r\n/g, "\n");
      let cut;
      while ((cut = buffer.indexOf("\n\n")) >= 0) {
        const frame = buffer.slice(0, cut);
        buffer = buffer.slice(cut + 2);
        for (const line of frame.split("\n")) {
          if (!line.startsWith("data: ") || line === "data: [DONE]") continue;
          const chunk = JSON.parse(line.slice(6));
          if (chunk.error) throw new Error(chunk.error.message);
          if (chunk.usage) usage = chunk.usage;
          for (const choice of chunk.choices || []) {
            const piece = choice.delta && choice.delta.content;
            if (piece) {
              if (firstAt === null) {
                firstAt = performance.now();
                meta.dataset.ttft = ((firstAt - started) / 1000).toFixed(3);
                showMeta(" · streaming…");
                if (usedHint) {  // joined by the request before it ran: its outcome is known
                  api("/v1/typing/" + usedHint.id).then((r) => r.json()).then((view) => {
                    hintOutcome = view.state;
                    showHint(view.state);
                    if (meta.dataset.streaming !== "done") showMeta(" · streaming…");
                  }).catch(() => {});
                }
              }
              tokens += 1;
              answer += piece;
              answerText.textContent = answer;
            }
          }
        }
      }
    }
  } catch (error) {
    answerText.textContent = answer + " [" + error.message + "]";
  }
  meta.dataset.streaming = "done";
  history.push({ role: "assistant", content: answer });
  const ttft = firstAt === null ? null : (firstAt - started) / 1000;
  const seconds = (performance.now() - (firstAt || started)) / 1000;
  const rate = tokens > 1 && seconds > 0 ? (tokens - 1) / seconds : 0;
  const cached = usage && usage.prompt_tokens_details ? usage.prompt_tokens_details.cached_tokens : 0;
  if (usedHint) {
    try { hintOutcome = (await (await api("/v1/typing/" + usedHint.id)).json()).state; } catch (e) { hintOutcome = "?"; }
  }
  meta.textContent = `TTFT ${ttft === null ? "-" : ttft.toFixed(2) + " s"} · ${rate.toFixed(1)} tok/s · ` +
    `${cached}/${usage ? usage.prompt_tokens : "?"} prompt tokens cached · hint ${hintOutcome}`;
  meta.dataset.ttft = ttft === null ? "" : ttft.toFixed(3);
  meta.dataset.hint = hintOutcome;
  meta.dataset.cached = String(cached);  // set last: the answer is complete
  answers += 1;
  const row = document.createElement("tr");
  for (const cell of [answers, usedHint ? "on" : "off", ttft === null ? "-" : ttft.toFixed(2), rate.toFixed(1), cached, hintOutcome]) {
    const td = document.createElement("td"); td.textContent = String(cell); row.appendChild(td);
  }
  $("stats").querySelector("tbody").appendChild(row);
  hint = null; lastDraftWords = -1; showHint("none");
}

async function refreshPanel() {
  try {
    const view = await (await api("/v1/scheduler")).json();
    $("slot").textContent = view.slot ? `${view.slot.kind} (${view.slot.priority}) ${view.slot.state}` : "idle";
    $("queues").textContent = Object.entries(view.queues).map(([k, v]) => `${k}: ${v.length}`).join(" · ");
    $("gates").innerHTML = "";
    for (const [name, closed] of Object.entries(view.gates)) {
      const span = document.createElement("span");
      span.className = "gate" + (closed ? " closed" : "");
      span.textContent = name.replace("_", " ") + (closed ? " (closed)" : "");
      $("gates").appendChild(span);
    }
  } catch (error) { $("slot").textContent = "unreachable: " + error.message; }
}

$("draft").addEventListener("input", onDraftInput);
$("draft").addEventListener("keydown", (e) => { if (e.key === "Enter" && !e.shiftKey) send(e); });
$("composer").addEventListener("submit", send);
$("apikey").addEventListener("change", loadModels);
loadModels();
refreshPanel();
setInterval(refreshPanel, 1000);
