import assert from "node:assert/strict";
import { test } from "node:test";
import { parseChatChunk, SseParser } from "../src/sse";

const STREAM =
  'data: {"choices":[{"delta":{"role":"assistant","content":""}}]}\r\n\r\n' +
  ": ping - 2026-12-05 00:00:00\r\n\r\n" +
  'data: {"choices":[{"delta":{"content":"Hel"}}]}\r\n\r\n' +
  'data: {"choices":[{"delta":{"content":"lo"},"finish_reason":"stop"}]}\r\n\r\n' +
  'data: {"choices":[],"usage":{"prompt_tokens":40,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":36}}}\r\n\r\n' +
  "data: [DONE]\r\n\r\n";

function eventsOf(chunks: string[]): string[] {
  const parser = new SseParser();
  return [...chunks.flatMap((chunk) => parser.feed(chunk)), ...parser.end()].map((event) => event.data);
}

test("a stream cut at every byte gives the same events as whole", () => {
  const whole = eventsOf([STREAM]);
  assert.equal(whole.length, 5); // the ping comment is no event
  assert.deepEqual(eventsOf([...STREAM]), whole);
  assert.deepEqual(eventsOf([STREAM.slice(0, 7), STREAM.slice(7, 100), STREAM.slice(100)]), whole);
});

test("\\n line ends, multi-line data, named events and a last frame without its blank line", () => {
  const parser = new SseParser();
  assert.deepEqual(parser.feed("event: error\ndata: a\ndata: b\n\ndata:x"), [{ event: "error", data: "a\nb" }]);
  assert.deepEqual(parser.end(), [{ event: "message", data: "x" }]);
});

test("chat chunks add up to the text, the finish reason and the usage", () => {
  const chunks = eventsOf([STREAM]).map(parseChatChunk);
  assert.equal(chunks.map((chunk) => chunk?.content ?? "").join(""), "Hello");
  assert.equal(chunks[2]?.finishReason, "stop");
  assert.equal(chunks[3]?.usage?.prompt_tokens_details?.cached_tokens, 36);
  assert.equal(chunks[4], null); // [DONE]
});

test("an error event after the 200 throws its message", () => {
  assert.throws(() => parseChatChunk('{"error":{"message":"the slot died","type":"server_error"}}'), /the slot died/);
});
