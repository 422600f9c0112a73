// The "edit selection" prompt and the answer's code. The prompt puts the instruction last, so
// that a typing hint holding the file's context and the selection (with the instruction typed
// so far as its draft) is a prefix of the request sent when the instruction is done.
import type { Message } from "./client";

/** How many characters of the file around the selection go with it. */
export const CONTEXT_CHARS = 4000;

export const EDIT_SYSTEM =
  "You edit code. Rewrite the selected code as the instruction says. Answer with the " +
  "rewritten code only, in one fenced code block, without explanations.";

export interface EditSubject {
  fileName: string;
  languageId: string;
  before: string;
  selection: string;
  after: string;
}

/** The text around [start, end) of `text`, at most CONTEXT_CHARS each side. */
export function subjectOf(fileName: string, languageId: string, text: string, start: number, end: number): EditSubject {
  return {
    fileName,
    languageId,
    before: text.slice(Math.max(0, start - CONTEXT_CHARS), start),
    selection: text.slice(start, end),
    after: text.slice(end, end + CONTEXT_CHARS),
  };
}

/** The user message without its instruction: the part a hint holds before anything is typed. */
export function editPreamble(subject: EditSubject): string {
  const fence = "```";
  return (
    `File: ${subject.fileName} (${subject.languageId})\n\n` +
    `Before the selection:\n${fence}\n${subject.before}\n${fence}\n\n` +
    `After the selection:\n${fence}\n${subject.after}\n${fence}\n\n` +
    `The selection:\n${fence}${subject.languageId}\n${subject.selection}\n${fence}\n\n` +
    "Instruction: "
  );
}

/** The conversation a hint posts (the draft is the user message so far) ... */
export function editHint(subject: EditSubject, instruction: string): { messages: Message[]; draft: string } {
  return { messages: [{ role: "system", content: EDIT_SYSTEM }], draft: editPreamble(subject) + instruction };
}

/** ... and the request's messages once the instruction is done. */
export function editMessages(subject: EditSubject, instruction: string): Message[] {
  return [
    { role: "system", content: EDIT_SYSTEM },
    { role: "user", content: editPreamble(subject) + instruction },
  ];
}

/** The code of an answer: its first fenced block, else the whole answer without a stray fence
 * line. The selection's own final newline is kept or left out as it was. */
export function codeOfAnswer(answer: string, selection: string): string {
  const fenced = /```[^\n`]*\n([\s\S]*?)(?:\n?```|$)/.exec(answer);
  let code = fenced ? fenced[1] : answer.trim().replace(/^```[^\n]*\n?/, "").replace(/\n?```$/, "");
  code = code.replace(/\s+$/, "");
  return selection.endsWith("\n") ? code + "\n" : code;
}
