#!/usr/bin/env node
// An agent that stays connected across a rug pull, through the official TypeScript SDK client (issue 28).
//
//   node clients/hold.mjs --url URL --seconds S [--every MS] [--marker TEXT] [--sdk current|1.17]
//
// Opens ONE session (streamable HTTP) and keeps it: lists tools every --every ms (default 500) and at once
// on notifications/tools/list_changed, for --seconds. Prints one JSON line per answer on stdout:
//   {"t": <unix seconds>, "kind": "list", "poisoned": <a description contains --marker>, "tools": [names]}
//   {"t": ..., "kind": "error", "error": "..."}        (a refused request: an MCP error, HTTP 503...)
//   {"t": ..., "kind": "list_changed"}
// The session is never re-opened: what it receives is what an agent already connected receives.
import { loadSdk, parseArgs } from "./lib.mjs";

const args = parseArgs(process.argv.slice(2));
const seconds = Number(args.seconds || 20);
const every = Number(args.every || 500);
const marker = args.marker || "<IMPORTANT>";
const now = () => Date.now() / 1000;
const line = (entry) => process.stdout.write(JSON.stringify({ t: now(), ...entry }) + "\n");
const errorText = (e) => (e && e.message) ? `${e.constructor?.name || "Error"}: ${e.message}`.slice(0, 300) : String(e);

const sdk = await loadSdk(args.sdk || "current");
const client = new sdk.client.Client({ name: "lockstep-connected-agent-ts", version: "1.0.0" }, { capabilities: {} });
let listing = false;
async function list() {
  if (listing) return;
  listing = true;
  try {
    const result = await client.listTools({}, { timeout: 5000 });
    const tools = result.tools || [];
    line({ kind: "list", poisoned: tools.some((t) => JSON.stringify(t).includes(marker)), tools: tools.map((t) => t.name) });
  } catch (e) {
    line({ kind: "error", error: errorText(e) });
  } finally {
    listing = false;
  }
}
client.setNotificationHandler(sdk.types.ToolListChangedNotificationSchema, async () => {
  line({ kind: "list_changed" });
  await list();
});
const transport = new sdk.streamable.StreamableHTTPClientTransport(new URL(args.url));
try {
  await client.connect(transport);
  line({ kind: "connected" });
} catch (e) {
  line({ kind: "error", error: errorText(e) });
  process.exit(0);
}
const end = Date.now() + seconds * 1000;
while (Date.now() < end) {
  await list();
  await new Promise((r) => setTimeout(r, every));
}
line({ kind: "done" });
process.exit(0);
