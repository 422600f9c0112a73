// The extension's settings (package.json's "contributes.configuration"), read when used so a
// change applies at once. The API key is not a setting: it lives in secret storage.
import * as vscode from "vscode";

export interface Settings {
  baseUrl: string;
  tier: string;
  typingHints: boolean;
  hintDelayMs: number;
  maxTokens: number;
  systemPrompt: string;
}

export function settings(): Settings {
  const config = vscode.workspace.getConfiguration("onemac");
  return {
    baseUrl: config.get("baseUrl", "http://127.0.0.1:8000"),
    tier: config.get("tier", ""),
    typingHints: config.get("typingHints", true),
    hintDelayMs: config.get("hintDelayMs", 250),
    maxTokens: config.get("maxTokens", 1024),
    systemPrompt: config.get("systemPrompt", "You are a helpful assistant."),
  };
}

export const API_KEY_SECRET = "onemac.apiKey";
