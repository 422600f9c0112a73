// The chat panel's page: renders the conversation, sends each change of the draft to the
// extension (which posts the typing hints), and shows per answer what the hint did.
// The extension does all HTTP; this page only talks to it through postMessage.
"use strict";
(function () {
  const vscode = acquireVsCodeApi();
  const $ = (id) => document.getElementById(id);
  let current = null; // the answer being streamed: {text, meta, answer}

  function addMessage(role, text) {
    const div = document.createElement("div");
    div.className = "msg " + role;
    const body = document.createElement("div");
    body.className = "text";
    body.textContent = text;
    div.appendChild(body);
    $("transcript").appendChild(div);
    $("transcript").scrollTop = $("transcript").scrollHeight;
    return div;
  }

  function showHint(hint) {
    const badge = $("hintstate");
    badge.dataset.state = hint ? hint.state : "none";
    badge.dataset.id = hint && hint.id ? hint.id : "";
    badge.textContent = hint ? `hint: ${hint.state}` + (hint.prefix_tokens ? ` (${hint.prefix_tokens} tokens)` : "") : "hint: none";
  }

  window.addEventListener("message", (event) => {
    const message = event.data;
    switch (message.type) {
      case "history": {
        $("transcript").innerHTML = "";
        for (const m of message.messages) addMessage(m.role, m.content);
        $("transcript").dataset.messages = String(message.messages.length);
        break;
      }
      case "models": {
        const select = $("model");
        select.innerHTML = "";
        for (const entry of message.models) {
          const option = document.createElement("option");
          option.value = entry.id;
          option.textContent = entry.label;
          select.appendChild(option);
        }
        if (message.selected) select.value = message.selected;
        if (message.error) showHint({ state: "models: " + message.error });
        break;
      }
      case "hints":
        $("hints").checked = message.on;
        break;
      case "hint":
        showHint(message.hint);
        break;
      case "start": {
        addMessage("user", message.text);
        const div = addMessage("assistant", "");
        const meta = document.createElement("div");
        meta.className = "meta";
        meta.dataset.streaming = "yes";
        meta.textContent = "waiting for the first token…";
        div.appendChild(meta);
        current = { text: div.querySelector(".text"), meta, answer: "" };
        break;
      }
      case "delta":
        if (!current) break;
        current.answer += message.text;
        current.text.textContent = current.answer;
        current.meta.textContent = "streaming…";
        $("transcript").scrollTop = $("transcript").scrollHeight;
        break;
      case "error":
        if (current) current.text.textContent = current.answer + " [" + message.message + "]";
        break;
      case "done": {
        if (!current) break;
        const s = message.stats;
        const ttft = s.ttft === null ? "-" : s.ttft.toFixed(2) + " s";
        current.meta.textContent =
          `TTFT ${ttft} · ${s.tokensPerSecond.toFixed(1)} tok/s · ` +
          `${s.cached}/${s.prompt} prompt tokens cached · hint ${s.hint}`;
        const data = current.meta.dataset;
        data.ttft = s.ttft === null ? "" : s.ttft.toFixed(4);
        data.prompt = String(s.prompt);
        data.hint = s.hint;
        data.hintId = s.hintId || "";
        data.streaming = "done";
        data.cached = String(s.cached); // set last: the answer is complete
        $("transcript").dataset.messages = String(Number($("transcript").dataset.messages || 0) + 2);
        current = null;
        break;
      }
    }
  });

  $("draft").addEventListener("input", () => vscode.postMessage({ type: "draft", text: $("draft").value }));
  $("draft").addEventListener("keydown", (event) => {
    if (event.key !== "Enter" || event.shiftKey || event.isComposing) return;
    event.preventDefault();
    const text = $("draft").value;
    if (!text.trim() || current) return;
    $("draft").value = "";
    vscode.postMessage({ type: "send", text });
  });
  $("model").addEventListener("change", () => vscode.postMessage({ type: "model", id: $("model").value }));
  $("hints").addEventListener("change", () => vscode.postMessage({ type: "hints", on: $("hints").checked }));
  for (const id of ["import", "export", "new"]) {
    $(id).addEventListener("click", () => vscode.postMessage({ type: "command", id }));
  }
  vscode.postMessage({ type: "ready" });
})();
