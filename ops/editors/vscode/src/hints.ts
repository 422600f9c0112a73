// Typing hints for one conversation, debounced the way the playground does it: the first
// keystroke of a message posts the conversation so far (with the draft) at once; each new whole
// word posts a progressive hint after a short delay, superseding the previous one; clearing the
// draft deletes the hint; sending takes the hint's session for the request, so the answer
// starts from the pre-computed cache. No vscode import: the unit tests drive it with fakes.
import type { Message, TypingHint } from "./client";

/** The part of the gateway client the tracker needs. */
export interface HintApi {
  postHint(body: { model?: string; messages: Message[]; session: string; draft: string }): Promise<TypingHint>;
  deleteHint(id: string): Promise<TypingHint>;
  getHint(id: string): Promise<TypingHint>;
}

export interface Timers {
  set(callback: () => void, ms: number): unknown;
  clear(handle: unknown): void;
}

const realTimers: Timers = {
  set: (callback, ms) => setTimeout(callback, ms),
  clear: (handle) => clearTimeout(handle as ReturnType<typeof setTimeout>),
};

export interface HintTrackerOptions {
  session: string;
  /** Debounce of progressive hints (the playground's 250 ms). */
  delayMs: () => number;
  enabled: () => boolean;
  /** The hint, or null when there is none, each time its known state changes. */
  onChange?: (hint: TypingHint | null) => void;
  onError?: (error: Error) => void;
  timers?: Timers;
  /** How often a queued or computing hint's state is read (0: not followed). */
  followMs?: number;
}

/** What a send takes from the tracker: the session to send, if a hint was posted for it. */
export interface TakenHint {
  session?: string;
  hint: TypingHint | null;
}

export function countWords(draft: string): number {
  const trimmed = draft.trim();
  return trimmed ? trimmed.split(/\s+/).length : 0;
}

export class HintTracker {
  /** The latest hint the gateway accepted for the message being typed. */
  hint: TypingHint | null = null;
  /** Hints posted since the tracker was made (for tests and the panel). */
  posted = 0;
  private started = false; // a hint was posted for the message being typed
  private lastWords = -1;
  private timer: unknown = null;
  private generation = 0; // bumped by clear() and take(): late answers know they are stale
  private readonly abandoned = new Set<number>(); // the generations clear() ended
  private sent = 0; // posts numbered in order: a late 202 never replaces a newer hint
  private shown = 0;
  private readonly timers: Timers;

  constructor(
    private readonly api: HintApi,
    private readonly options: HintTrackerOptions,
  ) {
    this.timers = options.timers ?? realTimers;
  }

  get session(): string {
    return this.options.session;
  }

  /** The draft changed; `messages` is the conversation before it. */
  onDraft(messages: Message[], draft: string, model?: string): void {
    if (!this.options.enabled()) return;
    if (!draft.trim()) {
      this.clear();
      return;
    }
    const words = countWords(draft);
    const endsWord = /\s$/.test(draft);
    if (this.started && words === this.lastWords && !endsWord) return;
    this.cancelTimer();
    if (!this.started) {
      this.post(messages, draft, words, model);
      return;
    }
    this.timer = this.timers.set(() => {
      this.timer = null;
      this.post(messages, draft, words, model);
    }, this.options.delayMs());
  }

  /** The draft was cleared (not sent): the hint's pre-computation is no longer wanted. */
  clear(): void {
    this.cancelTimer();
    if (this.started) this.abandoned.add(this.generation);
    this.generation += 1;
    const hint = this.hint;
    this.reset();
    if (hint) {
      this.api.deleteHint(hint.id).catch((error: Error) => this.options.onError?.(error));
      this.options.onChange?.(null);
    }
  }

  /** The message is sent: its request carries the session of the hints posted for it. */
  take(): TakenHint {
    this.cancelTimer();
    const taken: TakenHint = { session: this.started ? this.session : undefined, hint: this.hint };
    this.generation += 1;
    this.reset();
    return taken;
  }

  private reset(): void {
    this.hint = null;
    this.started = false;
    this.lastWords = -1;
  }

  private cancelTimer(): void {
    if (this.timer !== null) this.timers.clear(this.timer);
    this.timer = null;
  }

  private post(messages: Message[], draft: string, words: number, model?: string): void {
    const generation = this.generation;
    const number = ++this.sent;
    this.started = true;
    this.lastWords = words;
    this.posted += 1;
    this.api
      .postHint({ model, messages, session: this.session, draft })
      .then((hint) => {
        if (generation !== this.generation) {
          // Cleared while on its way: delete it too. (Taken: the request may use it.)
          if (this.abandoned.has(generation)) this.api.deleteHint(hint.id).catch(() => undefined);
          return;
        }
        if (number < this.shown) return; // a newer hint (which supersedes it) is already here
        this.shown = number;
        this.hint = hint;
        this.options.onChange?.(hint);
        this.follow(hint.id, generation);
      })
      .catch((error: Error) => this.options.onError?.(error));
  }

  /** Reads a queued or computing hint's state until it settles (the panel shows it). */
  private follow(id: string, generation: number): void {
    const every = this.options.followMs ?? 200;
    if (!every) return;
    const step = (): void => {
      const hint = this.hint;
      if (generation !== this.generation || !hint || hint.id !== id) return;
      if (hint.state !== "queued" && hint.state !== "computing") return;
      this.timers.set(() => {
        this.api
          .getHint(id)
          .then((view) => {
            if (generation !== this.generation || this.hint?.id !== id) return;
            this.hint = view;
            this.options.onChange?.(view);
            step();
          })
          .catch(() => undefined);
      }, every);
    };
    step();
  }
}
