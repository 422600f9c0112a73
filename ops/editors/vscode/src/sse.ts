// Server-Sent Events, as the gateway sends them: frames split by a blank line, "\r\n" or "\n"
// line ends (Litestar sends "\r\n"), "data:" lines joined by "\n", ": ping" comments skipped.
// Pure, so the unit tests feed it chunks cut anywhere.

/** One event: its `event:` name (default "message") and its joined `data:` lines. */
export interface SseEvent {
  event: string;
  data: string;
}

/** Turns a byte stream's decoded chunks into events, whatever the chunk boundaries. */
export class SseParser {
  private buffer = "";

  /** Feed one chunk; returns the events it completed. */
  feed(chunk: string): SseEvent[] {
    this.buffer += chunk;
    const events: SseEvent[] = [];
    for (;;) {
      const match = /\r\n\r\n|\n\n|\r\r/.exec(this.buffer);
      if (!match) break;
      const frame = this.buffer.slice(0, match.index);
      this.buffer = this.buffer.slice(match.index + match[0].length);
      const event = parseFrame(frame);
      if (event) events.push(event);
    }
    return events;
  }

  /** The end of the stream: a last frame without its blank line still counts. */
  end(): SseEvent[] {
    const rest = this.buffer;
    this.buffer = "";
    const event = rest.trim() ? parseFrame(rest) : null;
    return event ? [event] : [];
  }
}

function parseFrame(frame: string): SseEvent | null {
  let event = "message";
  const data: string[] = [];
  for (const line of frame.split(/\r\n|\n|\r/)) {
    if (!line || line.startsWith(":")) continue;
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "data") data.push(value);
    else if (field === "event") event = value;
  }
  return data.length ? { event, data: data.join("\n") } : null;
}

/** What a chat completion stream's chunks add up to, one chunk at a time. */
export interface ChatChunk {
  content: string;
  usage?: Usage;
  finishReason?: string;
}

export interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens?: number;
  prompt_tokens_details?: { cached_tokens?: number };
}

/** One `data:` payload of /v1/chat/completions with stream=true; null for "[DONE]".
 * An error event (sent after a 200 when the stream fails) throws with its message. */
export function parseChatChunk(data: string): ChatChunk | null {
  if (data === "[DONE]") return null;
  const chunk = JSON.parse(data) as {
    error?: { message?: string };
    usage?: Usage | null;
    choices?: { delta?: { content?: string | null }; finish_reason?: string | null }[];
  };
  if (chunk.error) throw new Error(chunk.error.message ?? "the stream failed");
  let content = "";
  let finishReason: string | undefined;
  for (const choice of chunk.choices ?? []) {
    content += choice.delta?.content ?? "";
    if (choice.finish_reason) finishReason = choice.finish_reason;
  }
  return { content, usage: chunk.usage ?? undefined, finishReason };
}
