// The status bar item: the gateway's state from /health (up, the default tier's state) and
// /v1/scheduler (what holds the slot, how many wait), read every few seconds.
import * as vscode from "vscode";
import { describeState, type GatewayClient } from "./client";

const EVERY_MS = 2000;

export class GatewayStatus implements vscode.Disposable {
  private readonly item = vscode.window.createStatusBarItem("onemac.status", vscode.StatusBarAlignment.Right, 100);
  private timer: ReturnType<typeof setInterval>;
  private reading = false;
  /** The last reading, for "Onemac: Show Gateway State". */
  last = "not read yet";

  constructor(private readonly client: GatewayClient) {
    this.item.name = "onemac-gateway";
    this.item.command = "onemac.showStatus";
    this.item.text = "$(circle-outline) onemac";
    this.item.show();
    this.timer = setInterval(() => void this.refresh(), EVERY_MS);
    void this.refresh();
  }

  async refresh(): Promise<void> {
    if (this.reading) return;
    this.reading = true;
    try {
      const [health, scheduler] = await Promise.all([this.client.health(), this.client.scheduler()]);
      const state = describeState(health, scheduler);
      // A still icon: a spinning one repaints the window all the time the slot is busy.
      this.item.text = `${state.busy ? "$(sync)" : "$(pass)"} onemac: ${state.short}`;
      this.item.tooltip = state.long;
      this.item.backgroundColor = undefined;
      this.last = state.long;
    } catch (error) {
      this.item.text = "$(error) onemac: unreachable";
      this.item.tooltip = (error as Error).message;
      this.item.backgroundColor = new vscode.ThemeColor("statusBarItem.warningBackground");
      this.last = `unreachable: ${(error as Error).message}`;
    } finally {
      this.reading = false;
    }
  }

  dispose(): void {
    clearInterval(this.timer);
    this.item.dispose();
  }
}
