// "Edit selection": the instruction is typed in an input box while a typing hint holds the
// selection and the file's context (the instruction so far is its draft); Enter sends the
// request with the hint's session, and the answer's code opens in a diff editor against the
// file, to accept (the ✓ in the title bar, "Onemac: Accept Edit", or the notification's button)
// or discard.
import * as vscode from "vscode";
import type { GatewayClient } from "./client";
import { codeOfAnswer, editHint, editMessages, type EditSubject, subjectOf } from "./edit";
import { HintTracker } from "./hints";
import { settings } from "./settings";

export const PROPOSAL_SCHEME = "onemac-proposal";

interface PendingEdit {
  document: vscode.TextDocument;
  range: vscode.Range;
  original: string;
  replacement: string;
  proposal: vscode.Uri;
}

/** The proposed versions of files, as read-only documents for the diff editor. */
export class ProposalDocuments implements vscode.TextDocumentContentProvider {
  private readonly texts = new Map<string, string>();
  private readonly changed = new vscode.EventEmitter<vscode.Uri>();
  readonly onDidChange = this.changed.event;

  set(uri: vscode.Uri, text: string): void {
    this.texts.set(uri.toString(), text);
    this.changed.fire(uri);
  }

  delete(uri: vscode.Uri): void {
    this.texts.delete(uri.toString());
  }

  provideTextDocumentContent(uri: vscode.Uri): string {
    return this.texts.get(uri.toString()) ?? "";
  }
}

export class EditFlow {
  private pending: PendingEdit | null = null;
  private count = 0;

  constructor(
    private readonly client: GatewayClient,
    private readonly proposals: ProposalDocuments,
  ) {}

  /** Asks for the instruction (posting hints while it is typed), then proposes the edit. */
  async start(): Promise<void> {
    const editor = vscode.window.activeTextEditor;
    if (!editor) {
      void vscode.window.showWarningMessage("Onemac: open a file and select the code to edit.");
      return;
    }
    const document = editor.document;
    const range = editor.selection.isEmpty ? document.lineAt(editor.selection.active.line).rangeIncludingLineBreak : new vscode.Range(editor.selection.start, editor.selection.end);
    const text = document.getText();
    const name = vscode.workspace.asRelativePath(document.uri);
    const subject = subjectOf(name, document.languageId, text, document.offsetAt(range.start), document.offsetAt(range.end));
    const instruction = await this.askInstruction(subject);
    if (instruction === undefined) return;
    await this.propose(document, range, subject, instruction.text, instruction.session);
  }

  private askInstruction(subject: EditSubject): Promise<{ text: string; session?: string } | undefined> {
    const tracker = new HintTracker(this.client, {
      session: `vscode-edit-${Math.random().toString(36).slice(2, 10)}`,
      delayMs: () => settings().hintDelayMs,
      enabled: () => settings().typingHints,
      followMs: 0,
    });
    const model = settings().tier || undefined;
    const input = vscode.window.createInputBox();
    input.title = "Onemac: edit the selection";
    input.placeholder = "What should change? (e.g. add type hints)";
    input.prompt = "Enter sends; the selection and the file around it are already on their way.";
    input.ignoreFocusOut = true;
    return new Promise((resolve) => {
      let done = false;
      input.onDidChangeValue((value) => {
        if (!value.trim()) {
          tracker.clear();
          return;
        }
        const hint = editHint(subject, value);
        tracker.onDraft(hint.messages, hint.draft, model);
      });
      input.onDidAccept(() => {
        if (!input.value.trim()) return;
        done = true;
        const taken = tracker.take();
        resolve({ text: input.value, session: taken.session });
        input.hide();
      });
      input.onDidHide(() => {
        if (!done) {
          tracker.clear();
          resolve(undefined);
        }
        input.dispose();
      });
      input.show();
    });
  }

  private async propose(document: vscode.TextDocument, range: vscode.Range, subject: EditSubject, instruction: string, session?: string): Promise<void> {
    const result = await vscode.window.withProgress(
      { location: vscode.ProgressLocation.Notification, title: "Onemac: editing the selection…", cancellable: true },
      (_progress, token) => {
        const abort = new AbortController();
        token.onCancellationRequested(() => abort.abort());
        return this.client
          .chat({ model: settings().tier || undefined, messages: editMessages(subject, instruction), session, maxTokens: settings().maxTokens }, () => undefined, abort.signal)
          .catch((error: Error) => {
            void vscode.window.showErrorMessage(`Onemac: the edit failed: ${error.message}`);
            return null;
          });
      },
    );
    if (!result) return;
    const replacement = codeOfAnswer(result.text, subject.selection);
    this.count += 1;
    const proposal = vscode.Uri.from({ scheme: PROPOSAL_SCHEME, path: "/" + document.uri.path.split("/").pop(), query: String(this.count) });
    const text = document.getText();
    this.proposals.set(proposal, text.slice(0, document.offsetAt(range.start)) + replacement + text.slice(document.offsetAt(range.end)));
    this.pending = { document, range, original: subject.selection, replacement, proposal };
    await vscode.commands.executeCommand("setContext", "onemac.editPending", true);
    const title = `${proposal.path.slice(1)} ↔ Onemac edit (accept: ✓)`;
    await vscode.commands.executeCommand("vscode.diff", document.uri, proposal, title, { preview: true });
    const cached = result.usage?.prompt_tokens_details?.cached_tokens ?? 0;
    const ttft = result.ttft === null ? "-" : `${result.ttft.toFixed(2)} s`;
    const choice = await vscode.window.showInformationMessage(
      `Onemac: edit proposed (TTFT ${ttft}, ${cached}/${result.usage?.prompt_tokens ?? "?"} prompt tokens cached). Apply it?`,
      "Accept",
      "Discard",
    );
    if (choice === "Accept") await this.accept();
    else if (choice === "Discard") await this.discard();
  }

  /** Applies the pending edit, if the selected text is still what was sent. */
  async accept(): Promise<boolean> {
    const pending = this.pending;
    if (!pending) return false;
    if (pending.document.getText(pending.range) !== pending.original) {
      void vscode.window.showErrorMessage("Onemac: the selection changed since the edit was asked for; discarded.");
      await this.discard();
      return false;
    }
    const edit = new vscode.WorkspaceEdit();
    edit.replace(pending.document.uri, pending.range, pending.replacement);
    const applied = await vscode.workspace.applyEdit(edit);
    await this.close();
    await vscode.window.showTextDocument(pending.document);
    return applied;
  }

  async discard(): Promise<void> {
    await this.close();
  }

  private async close(): Promise<void> {
    const pending = this.pending;
    this.pending = null;
    await vscode.commands.executeCommand("setContext", "onemac.editPending", false);
    if (!pending) return;
    for (const group of vscode.window.tabGroups.all) {
      for (const tab of group.tabs) {
        if (tab.input instanceof vscode.TabInputTextDiff && tab.input.modified.toString() === pending.proposal.toString()) {
          await vscode.window.tabGroups.close(tab);
        }
      }
    }
    this.proposals.delete(pending.proposal);
  }
}
