// onemac-gateway for VS Code: a chat panel that posts typing hints while you type, an "edit
// selection" command that hints the selection while the instruction is typed, and a status
// bar item with the gateway's state. Settings: onemac.baseUrl, onemac.tier, ...; the API key
// is kept in VS Code's secret storage ("Onemac: Set API Key…").
import * as vscode from "vscode";
import { ChatPanel } from "./chatPanel";
import { GatewayClient } from "./client";
import { formatConversation, parseConversation } from "./conversation";
import { EditFlow, PROPOSAL_SCHEME, ProposalDocuments } from "./editSelection";
import { API_KEY_SECRET, settings } from "./settings";
import { GatewayStatus } from "./status";

const JSON_FILTERS = { "Conversation (JSON)": ["json"] };

export function activate(context: vscode.ExtensionContext): void {
  const client = new GatewayClient({
    baseUrl: () => settings().baseUrl,
    apiKey: async () => (await context.secrets.get(API_KEY_SECRET)) || undefined,
  });
  const proposals = new ProposalDocuments();
  const edits = new EditFlow(client, proposals);
  const status = new GatewayStatus(client);
  const command = (id: string, run: (...args: never[]) => unknown): void => {
    context.subscriptions.push(vscode.commands.registerCommand(id, run));
  };

  command("onemac.openChat", () => void ChatPanel.show(context, client));
  command("onemac.newConversation", () => ChatPanel.show(context, client).reset());
  command("onemac.importConversation", async (uri?: vscode.Uri) => {
    const target =
      uri instanceof vscode.Uri
        ? uri
        : (
            await vscode.window.showOpenDialog({
              canSelectMany: false,
              filters: JSON_FILTERS,
              openLabel: "Import",
              defaultUri: vscode.workspace.workspaceFolders?.[0]?.uri,
            })
          )?.[0];
    if (!target) return;
    try {
      const messages = parseConversation(new TextDecoder().decode(await vscode.workspace.fs.readFile(target)));
      ChatPanel.show(context, client).reset(messages);
    } catch (error) {
      void vscode.window.showErrorMessage(`Onemac: cannot import ${target.fsPath}: ${(error as Error).message}`);
    }
  });
  command("onemac.exportConversation", async () => {
    const panel = ChatPanel.active;
    if (!panel) return;
    const target = await vscode.window.showSaveDialog({ filters: JSON_FILTERS, saveLabel: "Export" });
    if (target) await vscode.workspace.fs.writeFile(target, new TextEncoder().encode(formatConversation(panel.conversation)));
  });
  command("onemac.editSelection", () => edits.start());
  command("onemac.acceptEdit", () => edits.accept());
  command("onemac.discardEdit", () => edits.discard());
  command("onemac.setApiKey", async () => {
    const key = await vscode.window.showInputBox({ title: "Onemac: the gateway's API key", password: true, prompt: "Empty: no key" });
    if (key === undefined) return;
    if (key) await context.secrets.store(API_KEY_SECRET, key);
    else await context.secrets.delete(API_KEY_SECRET);
    void status.refresh();
  });
  command("onemac.showStatus", async () => {
    await status.refresh();
    void vscode.window.showInformationMessage(`Onemac: ${status.last.replace(/\n/g, " · ")}`);
  });
  context.subscriptions.push(status, vscode.workspace.registerTextDocumentContentProvider(PROPOSAL_SCHEME, proposals));
}

export function deactivate(): void {}
