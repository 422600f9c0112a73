import assert from "node:assert/strict";
import { test } from "node:test";
import { formatConversation, parseConversation } from "../src/conversation";

test("a conversation file round-trips; a bare list and text parts are read too", () => {
  const messages = [
    { role: "system" as const, content: "Be brief." },
    { role: "user" as const, content: "Hi" },
    { role: "assistant" as const, content: "Hello!" },
  ];
  assert.deepEqual(parseConversation(formatConversation(messages)), messages);
  assert.deepEqual(parseConversation('[{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]'), [
    { role: "user", content: "ab" },
  ]);
});

test("what is not a conversation says why", () => {
  assert.throws(() => parseConversation("{"), /not JSON/);
  assert.throws(() => parseConversation('{"turns": []}'), /expected/);
  assert.throws(() => parseConversation('[{"role": "tool", "content": "x"}]'), /message 0: role/);
  assert.throws(() => parseConversation('[{"role": "user", "content": 3}]'), /message 0: content/);
});
