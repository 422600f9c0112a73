import assert from "node:assert/strict";
import { test } from "node:test";
import type { Message, TypingHint } from "../src/client";
import { countWords, type HintApi, HintTracker, type Timers } from "../src/hints";

/** Timers that run only when the test says: `advance(ms)`. */
class ManualTimers implements Timers {
  now = 0;
  private queue: { at: number; callback: () => void; id: number }[] = [];
  private next = 0;
  set(callback: () => void, ms: number): unknown {
    const id = ++this.next;
    this.queue.push({ at: this.now + ms, callback, id });
    return id;
  }
  clear(handle: unknown): void {
    this.queue = this.queue.filter((entry) => entry.id !== handle);
  }
  get pending(): number {
    return this.queue.length;
  }
  advance(ms: number): void {
    this.now += ms;
    for (;;) {
      const due = this.queue.filter((entry) => entry.at <= this.now).sort((a, b) => a.at - b.at)[0];
      if (!due) return;
      this.clear(due.id);
      due.callback();
    }
  }
}

/** The gateway's hint endpoints, recorded; each posted hint answers "computing". */
class FakeApi implements HintApi {
  posts: { messages: Message[]; session: string; draft: string; model?: string }[] = [];
  deletes: string[] = [];
  reads: string[] = [];
  state: TypingHint["state"] = "computing";
  async postHint(body: { messages: Message[]; session: string; draft: string; model?: string }): Promise<TypingHint> {
    this.posts.push(body);
    return { id: `hint-${this.posts.length}`, state: "computing", model: "m", prefix_tokens: 10 * this.posts.length };
  }
  async deleteHint(id: string): Promise<TypingHint> {
    this.deletes.push(id);
    return { id, state: "aborted", model: "m", prefix_tokens: 0 };
  }
  async getHint(id: string): Promise<TypingHint> {
    this.reads.push(id);
    return { id, state: this.state, model: "m", prefix_tokens: 10 };
  }
}

const settle = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));
const HISTORY: Message[] = [{ role: "system", content: "You are a helpful assistant." }];

function tracker(api: FakeApi, timers: ManualTimers, followMs = 0, changes: (TypingHint | null)[] = []): HintTracker {
  return new HintTracker(api, {
    session: "vscode-test",
    delayMs: () => 250,
    enabled: () => true,
    timers,
    followMs,
    onChange: (hint) => changes.push(hint),
  });
}

/** Types `text` one character at a time, `msPerChar` apart. */
function type(hints: HintTracker, timers: ManualTimers, text: string, msPerChar: number, from = ""): void {
  for (let i = 1; i <= text.length; i++) {
    hints.onDraft(HISTORY, from + text.slice(0, i));
    timers.advance(msPerChar);
  }
}

test("words are counted as the playground does", () => {
  assert.equal(countWords(""), 0);
  assert.equal(countWords("  "), 0);
  assert.equal(countWords(" What is  it "), 3);
});

test("the first keystroke posts the conversation so far at once, with the draft", async () => {
  const api = new FakeApi();
  const timers = new ManualTimers();
  const hints = tracker(api, timers);
  hints.onDraft(HISTORY, "W", "small");
  assert.deepEqual(api.posts, [{ messages: HISTORY, session: "vscode-test", draft: "W", model: "small" }]);
  await settle();
  assert.equal(hints.hint?.id, "hint-1");
});

test("letters within a word post nothing; a new word posts once after the delay", async () => {
  const api = new FakeApi();
  const timers = new ManualTimers();
  const hints = tracker(api, timers);
  type(hints, timers, "What", 30); // the first keystroke posts; "hat" adds no word
  await settle();
  assert.equal(api.posts.length, 1);
  timers.advance(1000);
  assert.equal(api.posts.length, 1);
  hints.onDraft(HISTORY, "What ");
  timers.advance(249);
  assert.equal(api.posts.length, 1);
  timers.advance(1);
  assert.deepEqual(
    api.posts.map((post) => post.draft),
    ["W", "What "],
  );
});

test("typing faster than the delay posts the latest draft once it pauses", () => {
  const api = new FakeApi();
  const timers = new ManualTimers();
  const hints = tracker(api, timers);
  type(hints, timers, "What is the capital of France", 20);
  timers.advance(300);
  // Until a hint covers the words typed, each keystroke restarts the delay (the playground's
  // debounce): 20 ms a letter posts nothing more until the pause.
  assert.deepEqual(
    api.posts.map((post) => post.draft),
    ["W", "What is the capital of France"],
  );
});

test("clearing the draft deletes the hint; a later keystroke starts over at once", async () => {
  const api = new FakeApi();
  const timers = new ManualTimers();
  const changes: (TypingHint | null)[] = [];
  const hints = tracker(api, timers, 0, changes);
  hints.onDraft(HISTORY, "Hi");
  await settle();
  hints.onDraft(HISTORY, "Hi there");
  hints.onDraft(HISTORY, "");
  assert.deepEqual(api.deletes, ["hint-1"]);
  assert.equal(hints.hint, null);
  assert.equal(changes.at(-1), null);
  timers.advance(1000); // the pending progressive hint was cancelled
  assert.equal(api.posts.length, 1);
  hints.onDraft(HISTORY, "N");
  assert.equal(api.posts.length, 2);
});

test("a hint still on its way when the draft is cleared is deleted when it arrives", async () => {
  const api = new FakeApi();
  const timers = new ManualTimers();
  const hints = tracker(api, timers);
  hints.onDraft(HISTORY, "Hi");
  hints.onDraft(HISTORY, ""); // before the 202 came back
  await settle();
  assert.deepEqual(api.deletes, ["hint-1"]);
  assert.equal(hints.hint, null);
});

test("sending takes the session and the hint, and does not delete it", async () => {
  const api = new FakeApi();
  const timers = new ManualTimers();
  const hints = tracker(api, timers);
  assert.deepEqual(hints.take(), { session: undefined, hint: null }); // nothing typed: no session
  hints.onDraft(HISTORY, "Hi");
  await settle();
  hints.onDraft(HISTORY, "Hi there");
  const taken = hints.take();
  assert.equal(taken.session, "vscode-test");
  assert.equal(taken.hint?.id, "hint-1");
  timers.advance(1000); // the progressive hint due after "there" is not posted after the send
  await settle();
  assert.equal(api.posts.length, 1);
  assert.deepEqual(api.deletes, []);
  hints.onDraft(HISTORY, "N"); // the next message's first keystroke posts at once again
  assert.equal(api.posts.length, 2);
});

test("a computing hint's state is followed until it is ready", async () => {
  const api = new FakeApi();
  const timers = new ManualTimers();
  const changes: (TypingHint | null)[] = [];
  const hints = tracker(api, timers, 200, changes);
  hints.onDraft(HISTORY, "Hi");
  await settle();
  timers.advance(200);
  await settle();
  assert.deepEqual(api.reads, ["hint-1"]);
  api.state = "ready";
  timers.advance(200);
  await settle();
  assert.equal(hints.hint?.state, "ready");
  timers.advance(1000);
  await settle();
  assert.equal(api.reads.length, 2); // ready: no more reads
  assert.deepEqual(
    changes.map((hint) => hint?.state),
    ["computing", "computing", "ready"],
  );
});

test("a hint whose 202 comes after a newer one's does not replace it", async () => {
  const api = new FakeApi();
  const answers: (() => void)[] = [];
  const slow: HintApi = {
    postHint: (body) =>
      new Promise((resolve) => answers.push(() => resolve({ id: body.draft, state: "ready", model: "m", prefix_tokens: 1 }))),
    deleteHint: (id) => api.deleteHint(id),
    getHint: (id) => api.getHint(id),
  };
  const timers = new ManualTimers();
  const hints = new HintTracker(slow, { session: "s", delayMs: () => 250, enabled: () => true, timers, followMs: 0 });
  hints.onDraft(HISTORY, "Hi");
  hints.onDraft(HISTORY, "Hi there");
  timers.advance(250);
  assert.equal(answers.length, 2);
  answers[1](); // the newer hint's 202 first...
  await settle();
  answers[0](); // ...then the older one's
  await settle();
  assert.equal(hints.hint?.id, "Hi there");
});

test("with hints off nothing is posted", () => {
  const api = new FakeApi();
  const hints = new HintTracker(api, { session: "s", delayMs: () => 250, enabled: () => false, timers: new ManualTimers() });
  hints.onDraft(HISTORY, "Hello there");
  assert.equal(api.posts.length, 0);
  assert.equal(hints.take().session, undefined);
});
