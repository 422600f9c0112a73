// The chat panel: a webview that shows the conversation and the draft box; the extension host
// does the HTTP (the API key stays in secret storage, out of the page). While the user types,
// the host posts typing hints for the conversation so far; the request sent on Enter carries
// their session, and the panel shows what the hint did (TTFT, cached tokens, its outcome).
import * as vscode from "vscode";
import { type GatewayClient, type Message, pickerEntries, type TypingHint } from "./client";
import { HintTracker } from "./hints";
import { settings } from "./settings";

/** Messages from the page (media/chat.js). */
type FromPage =
  | { type: "ready" }
  | { type: "draft"; text: string }
  | { type: "send"; text: string }
  | { type: "model"; id: string }
  | { type: "hints"; on: boolean }
  | { type: "command"; id: "import" | "export" | "new" };

/** One answer's numbers, as the page shows them (and the browser test reads them). */
export interface AnswerStats {
  ttft: number | null;
  cached: number;
  prompt: number;
  completion: number;
  tokensPerSecond: number;
  hint: string; // "off", or the hint's state once the request ran ("used", "superseded"...)
  hintId?: string;
}

export class ChatPanel {
  private static current: ChatPanel | undefined;
  private messages: Message[] = [];
  private tracker: HintTracker;
  private hintsOn = settings().typingHints;
  private busy = false;

  static show(context: vscode.ExtensionContext, client: GatewayClient): ChatPanel {
    if (ChatPanel.current) {
      ChatPanel.current.panel.reveal();
      return ChatPanel.current;
    }
    const panel = vscode.window.createWebviewPanel("onemac.chat", "Onemac Chat", vscode.ViewColumn.Active, {
      enableScripts: true,
      retainContextWhenHidden: true,
      localResourceRoots: [vscode.Uri.joinPath(context.extensionUri, "media")],
    });
    ChatPanel.current = new ChatPanel(panel, context, client);
    return ChatPanel.current;
  }

  static get active(): ChatPanel | undefined {
    return ChatPanel.current;
  }

  private constructor(
    private readonly panel: vscode.WebviewPanel,
    private readonly context: vscode.ExtensionContext,
    private readonly client: GatewayClient,
  ) {
    this.tracker = this.newTracker();
    this.reset();
    panel.webview.html = this.html();
    panel.webview.onDidReceiveMessage((message: FromPage) => this.onMessage(message));
    panel.onDidDispose(() => {
      this.tracker.clear();
      ChatPanel.current = undefined;
    });
  }

  private newTracker(): HintTracker {
    const session = `vscode-${Math.random().toString(36).slice(2, 10)}`;
    return new HintTracker(this.client, {
      session,
      delayMs: () => settings().hintDelayMs,
      enabled: () => this.hintsOn,
      onChange: (hint) => this.post({ type: "hint", hint: hint && hintView(hint) }),
      onError: (error) => this.post({ type: "hint", hint: { state: "error: " + error.message } }),
    });
  }

  /** A new conversation: the system prompt only, a new hint session. */
  reset(messages?: Message[]): void {
    this.tracker.clear();
    this.tracker = this.newTracker();
    this.messages = messages?.length ? messages.slice() : [{ role: "system", content: settings().systemPrompt }];
    this.post({ type: "history", messages: this.messages });
  }

  get conversation(): Message[] {
    return this.messages.slice();
  }

  private post(message: unknown): void {
    void this.panel.webview.postMessage(message);
  }

  private async onMessage(message: FromPage): Promise<void> {
    switch (message.type) {
      case "ready":
        this.post({ type: "history", messages: this.messages });
        this.post({ type: "hints", on: this.hintsOn });
        await this.sendModels();
        return;
      case "draft":
        this.tracker.onDraft(this.messages, message.text, settings().tier || undefined);
        return;
      case "send":
        await this.send(message.text);
        return;
      case "model":
        await vscode.workspace.getConfiguration("onemac").update("tier", message.id, vscode.ConfigurationTarget.Global);
        return;
      case "hints":
        this.hintsOn = message.on;
        if (!message.on) this.tracker.clear();
        return;
      case "command": {
        const command = { import: "onemac.importConversation", export: "onemac.exportConversation", new: "onemac.newConversation" }[message.id];
        await vscode.commands.executeCommand(command);
        return;
      }
    }
  }

  private async sendModels(): Promise<void> {
    try {
      const models = await this.client.models();
      this.post({ type: "models", models: pickerEntries(models), selected: settings().tier });
    } catch (error) {
      this.post({ type: "models", models: [], error: (error as Error).message });
    }
  }

  private async send(text: string): Promise<void> {
    if (!text.trim() || this.busy) return;
    this.busy = true;
    const taken = this.tracker.take();
    const usedHint = this.hintsOn ? taken.hint : null;
    this.messages.push({ role: "user", content: text });
    this.post({ type: "start", text });
    const stats: AnswerStats = { ttft: null, cached: 0, prompt: 0, completion: 0, tokensPerSecond: 0, hint: usedHint ? "…" : "off", hintId: usedHint?.id };
    let answer = "";
    try {
      const result = await this.client.chat(
        { model: settings().tier || undefined, messages: this.messages, session: this.hintsOn ? taken.session : undefined, maxTokens: settings().maxTokens },
        (piece) => {
          answer += piece;
          this.post({ type: "delta", text: piece });
        },
      );
      answer = result.text;
      stats.ttft = result.ttft;
      stats.cached = result.usage?.prompt_tokens_details?.cached_tokens ?? 0;
      stats.prompt = result.usage?.prompt_tokens ?? 0;
      stats.completion = result.usage?.completion_tokens ?? 0;
      const decoding = result.ttft === null ? 0 : result.seconds - result.ttft;
      stats.tokensPerSecond = stats.completion > 1 && decoding > 0 ? (stats.completion - 1) / decoding : 0;
      if (usedHint) stats.hint = (await this.client.getHint(usedHint.id).catch(() => ({ state: "?" }))).state;
    } catch (error) {
      this.post({ type: "error", message: (error as Error).message });
    }
    this.messages.push({ role: "assistant", content: answer });
    this.post({ type: "done", stats });
    this.post({ type: "hint", hint: null });
    this.busy = false;
  }

  private html(): string {
    const webview = this.panel.webview;
    const media = (name: string): vscode.Uri => webview.asWebviewUri(vscode.Uri.joinPath(this.context.extensionUri, "media", name));
    const nonce = Math.random().toString(36).slice(2) + Math.random().toString(36).slice(2);
    return `<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src ${webview.cspSource}; script-src 'nonce-${nonce}';">
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="stylesheet" href="${media("chat.css")}"><title>Onemac Chat</title></head>
<body>
<header>
  <select id="model" title="Model or tier (from /v1/models)"></select>
  <label title="Post typing hints while you type"><input type="checkbox" id="hints" checked> hints</label>
  <button id="import" title="Import a conversation (OpenAI messages JSON)">Import…</button>
  <button id="export" title="Export this conversation">Export…</button>
  <button id="new" title="Start a new conversation">New</button>
</header>
<main id="transcript"></main>
<footer>
  <textarea id="draft" rows="3" placeholder="Ask something (Enter sends, Shift+Enter: new line)"></textarea>
  <div id="hintstate" data-state="none">hint: none</div>
</footer>
<script nonce="${nonce}" src="${media("chat.js")}"></script>
</body></html>`;
  }
}

function hintView(hint: TypingHint): { id: string; state: string; prefix_tokens: number } {
  return { id: hint.id, state: hint.state, prefix_tokens: hint.prefix_tokens };
}
