// Shared by the foreign clients and servers: which SDK release to load.
// The package "sdk-1-17" is @modelcontextprotocol/sdk 1.17.x under an npm alias (package.json), so both
// releases live side by side: the current one, and an older lenient one still in use by agents (before
// 1.18 its client accepted any Content-Type that merely contains "application/json").
export const SDK_PACKAGES = { current: "@modelcontextprotocol/sdk", "1.17": "sdk-1-17" };

export async function loadSdk(version) {
  const pkg = SDK_PACKAGES[version];
  if (!pkg) throw new Error(`unknown SDK version ${version}: one of ${Object.keys(SDK_PACKAGES).join(", ")}`);
  const load = (path) => import(`${pkg}/${path}`);
  const [client, streamable, sse, types, server, serverStreamable, serverSse] = await Promise.all([
    load("client/index.js"), load("client/streamableHttp.js"), load("client/sse.js"), load("types.js"),
    load("server/index.js"), load("server/streamableHttp.js"), load("server/sse.js"),
  ]);
  return { pkg, version, client, streamable, sse, types, server, serverStreamable, serverSse };
}

// Minimal argv parser: --flag value, --flag (true).
export function parseArgs(argv) {
  const out = {};
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (!a.startsWith("--")) throw new Error(`unexpected argument ${a}`);
    const key = a.slice(2);
    if (i + 1 < argv.length && !argv[i + 1].startsWith("--")) out[key] = argv[++i];
    else out[key] = true;
  }
  return out;
}
