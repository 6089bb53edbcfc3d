#!/usr/bin/env node
// A real agent's view of an MCP server, through the official TypeScript SDK client.
//
//   node clients/list.mjs --url URL [--sdk current|1.17] [--transport streamable-http|sse]
//        [--capabilities sampling,elicitation,roots] [--call TOOL [--args JSON] [--inflight]]
//        [--timeout MS] [--name CLIENT_NAME]
//
// Connects with the given SDK release, optionally announcing client capabilities (a server may show more
// tools to a client that announces sampling, elicitation or roots: issue 17 item 4), lists tools, prompts,
// resources and resource templates (every page), and prints ONE JSON line on stdout with what the client
// ACCEPTED: what the SDK handed to the application after its own parsing and validation. Errors are
// recorded per step; the script never exits non-zero for an MCP error, only for a usage error.
//
// --call TOOL starts a tools/call; with --inflight the lists are made while that call is still pending:
// an agent lists tools while a call is in flight (after list_changed, say), and a client accepts a
// response for ANY pending id from any body it parses (issue 17 item 1), so this is how a test puts a
// second pending id next to a list.
//
// Server-initiated requests are answered harmlessly: sampling returns a fixed text, elicitation
// declines, roots returns an empty list. Each one is recorded under "serverRequests".
import { loadSdk, parseArgs } from "./lib.mjs";

const args = parseArgs(process.argv.slice(2));
if (!args.url) {
  console.error("usage: list.mjs --url URL [--sdk current|1.17] [--transport streamable-http|sse] ...");
  process.exit(2);
}
const sdkVersion = args.sdk || "current";
const transportName = args.transport || "streamable-http";
const timeout = Number(args.timeout || 10000);
const capabilityNames = (args.capabilities && args.capabilities !== true ? args.capabilities.split(",") : [])
  .map((s) => s.trim()).filter(Boolean);

const out = {
  sdk: sdkVersion, transport: transportName, capabilities: capabilityNames, connected: false,
  serverInfo: null, serverCapabilities: null, instructions: null,
  tools: null, prompts: null, resources: null, resourceTemplates: null,
  call: null, notifications: [], serverRequests: [], errors: [],
};
const errorText = (e) => (e && e.message) ? `${e.constructor?.name || "Error"}: ${e.message}` : String(e);

async function main() {
  const sdk = await loadSdk(sdkVersion);
  const T = sdk.types;
  const capabilities = {};
  if (capabilityNames.includes("sampling")) capabilities.sampling = {};
  if (capabilityNames.includes("elicitation")) capabilities.elicitation = {};
  // URL-mode elicitation (2025-11-25) is announced as elicitation.url; some servers show a tool only then.
  if (capabilityNames.includes("elicitation.url")) capabilities.elicitation = { ...capabilities.elicitation, url: {} };
  if (capabilityNames.includes("roots")) capabilities.roots = { listChanged: true };
  for (const c of capabilityNames) {
    if (!["sampling", "elicitation", "elicitation.url", "roots"].includes(c)) throw new Error(`unknown capability ${c}`);
  }
  const client = new sdk.client.Client({ name: args.name || "lockstep-foreign-ts", version: "1.0.0" },
    { capabilities });
  if (capabilities.sampling) {
    client.setRequestHandler(T.CreateMessageRequestSchema, async () => {
      out.serverRequests.push("sampling/createMessage");
      return { role: "assistant", content: { type: "text", text: "sampled by the foreign test client" },
        model: "none", stopReason: "endTurn" };
    });
  }
  if (capabilities.elicitation) {  // one handler for both modes
    client.setRequestHandler(T.ElicitRequestSchema, async () => {
      out.serverRequests.push("elicitation/create");
      return { action: "decline" };
    });
  }
  if (capabilities.roots) {
    client.setRequestHandler(T.ListRootsRequestSchema, async () => {
      out.serverRequests.push("roots/list");
      return { roots: [] };
    });
  }
  client.fallbackNotificationHandler = async (n) => { out.notifications.push(n.method); };
  let closing = false;  // an SSE client's own close aborts its stream: not the server's doing
  client.onerror = (e) => { if (!closing) out.errors.push({ step: "transport", error: errorText(e) }); };

  const url = new URL(args.url);
  const transport = transportName === "sse"
    ? new sdk.sse.SSEClientTransport(url)
    : new sdk.streamable.StreamableHTTPClientTransport(url);
  try {
    await client.connect(transport, { timeout });
  } catch (e) {
    out.errors.push({ step: "connect", error: errorText(e) });
    return;
  }
  out.connected = true;
  out.serverInfo = client.getServerVersion() || null;
  out.serverCapabilities = client.getServerCapabilities() || null;
  out.instructions = client.getInstructions ? (client.getInstructions() ?? null) : null;

  let pendingCall = null;
  if (args.call) {
    const progress = [];
    const params = { name: args.call, arguments: args.args ? JSON.parse(args.args) : {} };
    pendingCall = client.callTool(params, undefined, { timeout, onprogress: (p) => progress.push(p) })
      .then((r) => ({ name: args.call, result: r, progress }))
      .catch((e) => ({ name: args.call, error: errorText(e), progress }));
    if (!args.inflight) out.call = await pendingCall;
  }

  const caps = out.serverCapabilities || {};
  const pages = async (step, fetchPage, key) => {
    const items = [];
    let cursor;
    try {
      for (let i = 0; i < 100; i++) {
        const r = await fetchPage(cursor ? { cursor } : undefined);
        items.push(...(r[key] || []));
        cursor = r.nextCursor;
        if (!cursor) break;
      }
      return items;
    } catch (e) {
      out.errors.push({ step, error: errorText(e) });
      return null;
    }
  };
  const opts = { timeout };
  if (caps.tools) {
    const tools = await pages("tools/list", (p) => client.listTools(p, opts), "tools");
    out.tools = tools && tools.map((t) => ({ name: t.name, description: t.description ?? null, tool: t }));
  }
  if (caps.prompts) {
    const prompts = await pages("prompts/list", (p) => client.listPrompts(p, opts), "prompts");
    out.prompts = prompts && prompts.map((p) => ({ name: p.name, description: p.description ?? null, prompt: p }));
  }
  if (caps.resources) {
    const resources = await pages("resources/list", (p) => client.listResources(p, opts), "resources");
    out.resources = resources && resources.map((r) => ({ uri: r.uri, name: r.name, resource: r }));
    const templates = await pages("resources/templates/list",
      (p) => client.listResourceTemplates(p, opts), "resourceTemplates");
    out.resourceTemplates = templates && templates.map((r) => ({ uriTemplate: r.uriTemplate, name: r.name, template: r }));
  }
  if (args.inflight && pendingCall) out.call = await pendingCall;
  closing = true;
  try { await client.close(); } catch (e) { out.errors.push({ step: "close", error: errorText(e) }); }
}

const hardStop = setTimeout(() => {
  out.errors.push({ step: "deadline", error: "the client did not finish in time" });
  process.stdout.write(JSON.stringify(out) + "\n");
  process.exit(0);
}, timeout * 4 + 5000);
try {
  await main();
} catch (e) {
  out.errors.push({ step: "main", error: errorText(e) });
}
clearTimeout(hardStop);
process.stdout.write(JSON.stringify(out) + "\n");
process.exit(0);
