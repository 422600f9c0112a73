// The gateway's HTTP API as the extension uses it: OpenAI's /v1/models and streaming
// /v1/chat/completions (with the gateway's `session` field), the typing hints of /v1/typing,
// and /v1/scheduler and /health for the status bar. No vscode import: unit tests give it a
// fake fetch.
import { parseChatChunk, SseParser, type Usage } from "./sse";

export type Message = { role: "system" | "user" | "assistant"; content: string };

/** A typing hint as /v1/typing returns it (gateway extension, not in the OpenAI spec). */
export interface TypingHint {
  id: string;
  state: "queued" | "computing" | "ready" | "used" | "aborted" | "superseded" | "expired";
  model: string;
  session?: string | null;
  prefix_tokens: number;
  cached_tokens?: number;
  speculated?: number | null;
}

export interface ModelInfo {
  id: string;
  tier?: string;
  kind?: string;
  loaded?: boolean;
}

/** One entry per tier (its first model), as the playground's picker. */
export function pickerEntries(models: ModelInfo[]): { id: string; label: string }[] {
  const seen = new Set<string>();
  const entries: { id: string; label: string }[] = [];
  for (const model of models) {
    const tier = model.tier ?? model.id;
    if (seen.has(tier)) continue;
    seen.add(tier);
    entries.push({ id: model.id, label: `${model.id} (${model.kind ?? "model"}${model.loaded === false ? ", not loaded" : ""})` });
  }
  return entries;
}

export interface SchedulerView {
  slot: { kind: string; priority: string; state: string } | null;
  queues: Record<string, unknown[]>;
  gates: Record<string, boolean>;
}

export interface HealthView {
  status?: string;
  default_tier?: string;
  tiers?: Record<string, { kind?: string; model?: string; state?: string; loaded?: boolean }>;
}

/** The status bar's words for /health and /v1/scheduler: short, and a tooltip. */
export function describeState(health: HealthView, scheduler: SchedulerView): { short: string; long: string; busy: boolean } {
  const waiting = Object.values(scheduler.queues ?? {}).reduce((sum, queue) => sum + (Array.isArray(queue) ? queue.length : 0), 0);
  const slot = scheduler.slot;
  const short = (slot ? `${slot.kind} ${slot.state}` : "idle") + (waiting ? ` +${waiting} waiting` : "");
  const tier = health.default_tier && health.tiers?.[health.default_tier];
  const closed = Object.entries(scheduler.gates ?? {}).filter(([, isClosed]) => isClosed).map(([name]) => name);
  const long = [
    `gateway: ${health.status ?? "?"}`,
    tier ? `default tier ${health.default_tier}: ${tier.model ?? "?"} (${tier.state ?? "?"})` : "",
    `slot: ${slot ? `${slot.kind} (${slot.priority}) ${slot.state}` : "idle"}`,
    `waiting: ${waiting}`,
    closed.length ? `closed gates: ${closed.join(", ")}` : "gates open",
  ].filter(Boolean).join("\n");
  return { short, long, busy: slot !== null && slot !== undefined };
}

/** What one streamed answer came to; times in seconds from the request's start. */
export interface ChatResult {
  text: string;
  usage?: Usage;
  finishReason?: string;
  ttft: number | null;
  seconds: number;
}

export interface ChatRequest {
  model?: string;
  messages: Message[];
  session?: string;
  maxTokens?: number;
}

export class GatewayError extends Error {
  constructor(
    message: string,
    readonly status?: number,
  ) {
    super(message);
  }
}

type Fetch = typeof fetch;

export interface ClientOptions {
  baseUrl: () => string;
  apiKey: () => Promise<string | undefined>;
  fetch?: Fetch;
  now?: () => number;
}

export class GatewayClient {
  private readonly fetch: Fetch;
  private readonly now: () => number;

  constructor(private readonly options: ClientOptions) {
    this.fetch = options.fetch ?? ((input, init) => fetch(input, init));
    this.now = options.now ?? (() => performance.now());
  }

  private async request(
    path: string,
    init: { method?: string; body?: unknown; signal?: AbortSignal; timeoutMs?: number } = {},
  ): Promise<Response> {
    const headers: Record<string, string> = { "content-type": "application/json" };
    const key = await this.options.apiKey();
    if (key) headers.authorization = `Bearer ${key}`;
    const url = this.options.baseUrl().replace(/\/+$/, "") + path;
    const signal = init.signal ?? AbortSignal.timeout(init.timeoutMs ?? 10_000);
    let response: Response;
    try {
      response = await this.fetch(url, {
        method: init.method ?? (init.body === undefined ? "GET" : "POST"),
        headers,
        body: init.body === undefined ? undefined : JSON.stringify(init.body),
        signal,
      });
    } catch (error) {
      throw new GatewayError(`${url}: ${(error as Error).message}`);
    }
    if (!response.ok) {
      const body = (await response.json().catch(() => ({}))) as { error?: { message?: string } };
      throw new GatewayError(body.error?.message ?? `${response.status} ${response.statusText}`, response.status);
    }
    return response;
  }

  async models(): Promise<ModelInfo[]> {
    const body = (await (await this.request("/v1/models")).json()) as { data: ModelInfo[] };
    return body.data;
  }

  async postHint(body: { model?: string; messages: Message[]; session: string; draft: string }): Promise<TypingHint> {
    return (await (await this.request("/v1/typing", { body })).json()) as TypingHint;
  }

  async getHint(id: string): Promise<TypingHint> {
    return (await (await this.request(`/v1/typing/${encodeURIComponent(id)}`)).json()) as TypingHint;
  }

  async deleteHint(id: string): Promise<TypingHint> {
    const path = `/v1/typing/${encodeURIComponent(id)}`;
    return (await (await this.request(path, { method: "DELETE" })).json()) as TypingHint;
  }

  async scheduler(): Promise<SchedulerView> {
    return (await (await this.request("/v1/scheduler", { timeoutMs: 3_000 })).json()) as SchedulerView;
  }

  async health(): Promise<HealthView> {
    return (await (await this.request("/health", { timeoutMs: 3_000 })).json()) as HealthView;
  }

  /** A streamed chat completion; `onText` gets each piece as it arrives. */
  async chat(request: ChatRequest, onText: (piece: string) => void, signal?: AbortSignal): Promise<ChatResult> {
    const started = this.now();
    const response = await this.request("/v1/chat/completions", {
      body: {
        model: request.model || "default",
        messages: request.messages,
        stream: true,
        stream_options: { include_usage: true },
        max_tokens: request.maxTokens,
        session: request.session,
      },
      signal: signal ?? AbortSignal.timeout(600_000),
    });
    const result: ChatResult = { text: "", ttft: null, seconds: 0 };
    const parser = new SseParser();
    const decoder = new TextDecoder();
    const take = (data: string): void => {
      const chunk = parseChatChunk(data);
      if (!chunk) return;
      if (chunk.usage) result.usage = chunk.usage;
      if (chunk.finishReason) result.finishReason = chunk.finishReason;
      if (chunk.content) {
        if (result.ttft === null) result.ttft = (this.now() - started) / 1000;
        result.text += chunk.content;
        onText(chunk.content);
      }
    };
    if (!response.body) throw new GatewayError("the answer has no body");
    for await (const bytes of response.body as unknown as AsyncIterable<Uint8Array>) {
      for (const event of parser.feed(decoder.decode(bytes, { stream: true }))) take(event.data);
    }
    for (const event of parser.end()) take(event.data);
    result.seconds = (this.now() - started) / 1000;
    return result;
  }
}
