import assert from "node:assert/strict";
import { test } from "node:test";
import { codeOfAnswer, CONTEXT_CHARS, editHint, editMessages, subjectOf } from "../src/edit";

const FILE = "import math\n\ndef area(r):\n    return 3.14 * r * r\n\nprint(area(2))\n";
const start = FILE.indexOf("def");
const end = FILE.indexOf("\n\nprint") + 1;

test("the subject is the selection with the file around it", () => {
  const subject = subjectOf("geo.py", "python", FILE, start, end);
  assert.equal(subject.selection, "def area(r):\n    return 3.14 * r * r\n");
  assert.equal(subject.before, "import math\n\n");
  assert.equal(subject.after, "\nprint(area(2))\n");
  const long = "x".repeat(CONTEXT_CHARS * 2);
  assert.equal(subjectOf("a", "plaintext", long + "SEL" + long, long.length, long.length + 3).before.length, CONTEXT_CHARS);
});

test("every hint while the instruction is typed is a prefix of the request", () => {
  const subject = subjectOf("geo.py", "python", FILE, start, end);
  const request = editMessages(subject, "use math.pi");
  for (const typed of ["u", "use ", "use math.pi"]) {
    const hint = editHint(subject, typed);
    assert.deepEqual(hint.messages, request.slice(0, 1));
    assert.ok(request[1].content.startsWith(hint.draft), typed);
    assert.ok(hint.draft.includes(subject.selection) && hint.draft.includes("print(area(2))"));
  }
  assert.ok(request[1].content.endsWith("Instruction: use math.pi"));
});

test("the answer's code is its first fenced block, with the selection's final newline", () => {
  const selection = "def area(r):\n    return 3.14 * r * r\n";
  const answer = "Here it is:\n```python\ndef area(r):\n    return math.pi * r * r\n```\nDone.";
  assert.equal(codeOfAnswer(answer, selection), "def area(r):\n    return math.pi * r * r\n");
  assert.equal(codeOfAnswer("  x = 1  \n", "x=1"), "x = 1");
  assert.equal(codeOfAnswer("```\nunfinished = True", "a\n"), "unfinished = True\n"); // cut by max_tokens
  assert.equal(codeOfAnswer("x = math.pi\n```", "a"), "x = math.pi"); // a closing fence alone
});
