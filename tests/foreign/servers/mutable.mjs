#!/usr/bin/env node
// An MCP server built on the official TypeScript SDK whose tools can be swapped while it runs (a rug pull).
//
//   node servers/mutable.mjs --port N [--sdk current|1.17] [--tools JSON]    (or env FOREIGN_TOOLS=JSON)
//        [--dns-rebinding-protection]   the SDK's own Host/Origin check: only 127.0.0.1:N / localhost:N
//
// Transports, as the TypeScript SDK serves them (not as the Python SDK does):
//   streamable HTTP   POST/GET/DELETE /mcp, stateful (Mcp-Session-Id)
//   legacy HTTP+SSE   GET /sse, then POST /messages?sessionId=...   (the Python SDK spells it session_id)
// Side channel (not MCP; tests only):
//   GET  /_control/tools        the current tool list
//   POST /_control/tools        body: a JSON array of tools; replaces the list and sends
//                               notifications/tools/list_changed on every open session
//   GET  /_control/health       200 once listening
// Tools: whatever the list says; a call to a listed tool answers "called NAME". A call of a tool with
// arguments {"ms": N} waits N ms first, sending notifications/progress if the caller asked for them,
// so a test can keep a call in flight while it lists.
import http from "node:http";
import { randomUUID } from "node:crypto";
import { loadSdk, parseArgs } from "../clients/lib.mjs";

const args = parseArgs(process.argv.slice(2));
const port = Number(args.port || process.env.PORT || 0);
const sdk = await loadSdk(args.sdk || "current");
const T = sdk.types;

const DEFAULT_TOOLS = [
  { name: "get_forecast", description: "Get the weather forecast for a location.",
    inputSchema: { type: "object", properties: { latitude: { type: "number" }, longitude: { type: "number" } },
      required: ["latitude", "longitude"] } },
  { name: "get_alerts", description: "Get weather alerts for a US state.",
    inputSchema: { type: "object", properties: { state: { type: "string" } }, required: ["state"] } },
];
let tools = JSON.parse(args.tools || process.env.FOREIGN_TOOLS || "null") || DEFAULT_TOOLS;
const servers = new Set();   // every connected MCP Server, to announce list_changed

function makeServer() {
  const server = new sdk.server.Server({ name: "lockstep-foreign-ts-server", version: "1.0.0" },
    { capabilities: { tools: { listChanged: true } }, instructions: "Weather tools (TypeScript SDK)." });
  server.setRequestHandler(T.ListToolsRequestSchema, async () => ({ tools }));
  server.setRequestHandler(T.CallToolRequestSchema, async (request, extra) => {
    const { name, arguments: a = {} } = request.params;
    if (!tools.some((t) => t.name === name)) {
      return { content: [{ type: "text", text: `unknown tool ${name}` }], isError: true };
    }
    const ms = Number(a.ms || 0);
    if (ms > 0) {
      const token = request.params._meta?.progressToken;
      for (let step = 1; step <= 2; step++) {
        await new Promise((r) => setTimeout(r, ms / 2));
        if (token !== undefined) {
          await extra.sendNotification({ method: "notifications/progress",
            params: { progressToken: token, progress: step, total: 2 } });
        }
      }
    }
    return { content: [{ type: "text", text: `called ${name}` }] };
  });
  servers.add(server);
  server.onclose = () => servers.delete(server);
  return server;
}

// DNS-rebinding protection as the SDK offers it (off by default in the SDK): a web page that rebinds
// its own name to 127.0.0.1 sends Host/Origin of that name, which this refuses with 403.
function rebinding() {
  if (!args["dns-rebinding-protection"]) return {};
  const p = httpServer.address().port;
  return { enableDnsRebindingProtection: true,
    allowedHosts: [`127.0.0.1:${p}`, `localhost:${p}`, `[::1]:${p}`],
    allowedOrigins: [`http://127.0.0.1:${p}`, `http://localhost:${p}`, `http://[::1]:${p}`] };
}

const streamable = new Map();   // Mcp-Session-Id -> transport
const legacy = new Map();       // sessionId -> SSE transport

async function readJson(req) {
  const chunks = [];
  for await (const c of req) chunks.push(c);
  return JSON.parse(Buffer.concat(chunks).toString("utf8") || "null");
}

const httpServer = http.createServer(async (req, res) => {
  const url = new URL(req.url, "http://localhost");
  try {
    if (url.pathname === "/_control/health") { res.writeHead(200).end("ok"); return; }
    if (url.pathname === "/_control/tools") {
      if (req.method === "POST") {
        tools = await readJson(req);
        await Promise.allSettled([...servers].map((s) => s.sendToolListChanged()));
      }
      res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify(tools));
      return;
    }
    if (url.pathname === "/mcp") {
      const sid = req.headers["mcp-session-id"];
      if (sid) {
        const t = streamable.get(sid);
        if (!t) { res.writeHead(404).end("unknown session"); return; }
        await t.handleRequest(req, res);
        return;
      }
      if (req.method !== "POST") { res.writeHead(400).end("no session"); return; }
      const t = new sdk.serverStreamable.StreamableHTTPServerTransport({
        sessionIdGenerator: () => randomUUID(),
        onsessioninitialized: (id) => streamable.set(id, t),
        ...rebinding(),
      });
      t.onclose = () => { if (t.sessionId) streamable.delete(t.sessionId); };
      await makeServer().connect(t);
      await t.handleRequest(req, res);
      return;
    }
    if (url.pathname === "/sse" && req.method === "GET") {
      const t = new sdk.serverSse.SSEServerTransport("/messages", res);
      legacy.set(t.sessionId, t);
      res.on("close", () => legacy.delete(t.sessionId));
      await makeServer().connect(t);
      return;
    }
    if (url.pathname === "/messages" && req.method === "POST") {
      const t = legacy.get(url.searchParams.get("sessionId"));
      if (!t) { res.writeHead(404).end("unknown session"); return; }
      await t.handlePostMessage(req, res);
      return;
    }
    res.writeHead(404).end("not found");
  } catch (e) {
    console.error(e);
    if (!res.headersSent) res.writeHead(500).end(String(e));
  }
});
httpServer.listen(port, "127.0.0.1", () => {
  console.error(`foreign TS-SDK server (${sdk.version}) on 127.0.0.1:${httpServer.address().port}`);
});
