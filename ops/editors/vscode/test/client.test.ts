import assert from "node:assert/strict";
import { test } from "node:test";
import { describeState, GatewayClient, GatewayError, pickerEntries } from "../src/client";

/** A fetch that records the request and answers `body` in `pieces` (a streamed response). */
function fakeFetch(status: number, pieces: string[], seen: { url?: string; init?: RequestInit }[]): typeof fetch {
  return (async (url: string, init: RequestInit) => {
    seen.push({ url, init });
    const stream = new ReadableStream<Uint8Array>({
      start(controller) {
        for (const piece of pieces) controller.enqueue(new TextEncoder().encode(piece));
        controller.close();
      },
    });
    return new Response(stream, { status, headers: { "content-type": "text/event-stream" } });
  }) as unknown as typeof fetch;
}

test("a streamed chat sends the session and the key, and reports TTFT, text and usage", async () => {
  const seen: { url?: string; init?: RequestInit }[] = [];
  let clock = 1000;
  const client = new GatewayClient({
    baseUrl: () => "http://127.0.0.1:8000/",
    apiKey: async () => "sk-local",
    fetch: fakeFetch(
      200,
      [
        'data: {"choices":[{"delta":{"content":"Pa"}}]}\r\n\r\ndata: {"choices":[{"delta":{"con',
        'tent":"ris"},"finish_reason":"stop"}]}\r\n\r\n',
        'data: {"choices":[],"usage":{"prompt_tokens":1500,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":1490}}}\r\n\r\ndata: [DONE]\r\n\r\n',
      ],
      seen,
    ),
    now: () => (clock += 50),
  });
  const pieces: string[] = [];
  const result = await client.chat({ messages: [{ role: "user", content: "Capital of France?" }], session: "vscode-1", maxTokens: 8 }, (piece) => pieces.push(piece));
  assert.equal(seen[0].url, "http://127.0.0.1:8000/v1/chat/completions");
  const body = JSON.parse(String(seen[0].init?.body));
  assert.equal(body.session, "vscode-1");
  assert.equal(body.stream, true);
  assert.deepEqual(body.stream_options, { include_usage: true });
  assert.equal((seen[0].init?.headers as Record<string, string>).authorization, "Bearer sk-local");
  assert.deepEqual(pieces, ["Pa", "ris"]);
  assert.equal(result.text, "Paris");
  assert.equal(result.usage?.prompt_tokens_details?.cached_tokens, 1490);
  assert.equal(result.finishReason, "stop");
  assert.equal(result.ttft, 0.05);
});

test("an error answer is raised with the gateway's message and status", async () => {
  const client = new GatewayClient({
    baseUrl: () => "http://gw",
    apiKey: async () => undefined,
    fetch: (async () => new Response('{"error":{"message":"Invalid API key"}}', { status: 401 })) as unknown as typeof fetch,
  });
  await assert.rejects(client.models(), (error: GatewayError) => error.status === 401 && /Invalid API key/.test(error.message));
});

test("the picker has one entry per tier; the status bar says what holds the slot", () => {
  assert.deepEqual(
    pickerEntries([
      { id: "default", tier: "default", kind: "mlx", loaded: true },
      { id: "smollm2", tier: "default", kind: "mlx", loaded: true },
      { id: "big", tier: "big", kind: "mlx", loaded: false },
    ]),
    [
      { id: "default", label: "default (mlx)" },
      { id: "big", label: "big (mlx, not loaded)" },
    ],
  );
  const busy = describeState(
    { status: "ok", default_tier: "default", tiers: { default: { model: "smollm2", state: "ready" } } },
    { slot: { kind: "chat", priority: "interactive", state: "prefill" }, queues: { interactive: [{}], background: [] }, gates: { background: true } },
  );
  assert.equal(busy.short, "chat prefill +1 waiting");
  assert.match(busy.long, /closed gates: background/);
  assert.equal(describeState({ status: "ok" }, { slot: null, queues: {}, gates: {} }).short, "idle");
});
