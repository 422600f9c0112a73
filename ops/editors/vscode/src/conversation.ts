// A conversation as a file: import one saved earlier (or exported by another client) to go on
// with it, export the panel's. The format is OpenAI's: {"messages": [...]} or a bare array;
// content may be a string or a list of text parts. No vscode import.
import type { Message } from "./client";

const ROLES = new Set(["system", "user", "assistant"]);

/** The messages of a conversation file; throws with a reason a person can act on. */
export function parseConversation(text: string): Message[] {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (error) {
    throw new Error(`not JSON: ${(error as Error).message}`);
  }
  const list = Array.isArray(parsed) ? parsed : (parsed as { messages?: unknown } | null)?.messages;
  if (!Array.isArray(list)) throw new Error('expected {"messages": [...]} or a list of messages');
  return list.map((item, index) => {
    const { role, content } = (item ?? {}) as { role?: unknown; content?: unknown };
    if (typeof role !== "string" || !ROLES.has(role)) {
      throw new Error(`message ${index}: role must be system, user or assistant`);
    }
    return { role: role as Message["role"], content: contentText(content, index) };
  });
}

function contentText(content: unknown, index: number): string {
  if (typeof content === "string") return content;
  if (Array.isArray(content)) {
    return content
      .map((part: { type?: string; text?: string }) => (part?.type === "text" && typeof part.text === "string" ? part.text : ""))
      .join("");
  }
  if (content === null || content === undefined) return "";
  throw new Error(`message ${index}: content must be a string or a list of text parts`);
}

export function formatConversation(messages: Message[]): string {
  return JSON.stringify({ messages }, null, 2) + "\n";
}
