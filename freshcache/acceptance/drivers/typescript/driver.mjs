// The driver for the official TypeScript SDK 2.x: `Client` from @modelcontextprotocol/client,
// with its response cache (on by default: it honours the server's ttlMs/cacheScope and evicts on
// the change notifications a `listen()` stream delivers).
//
// Thin on purpose: reads through client.readResource, lists through client.listResources; one
// listen() is kept open for the selection and opened again when it ends, as the SDK's docs say
// (not when the server answers that it has no such method).
// The SDK has no freshness states, so a read answers its text or its error. Its cache reads the
// real clock (no `advance`). Speaks the driver protocol (docs/driver-protocol.md) on stdin/stdout.
import { createInterface } from "node:readline";
import { readFileSync } from "node:fs";
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";
import { StdioClientTransport } from "@modelcontextprotocol/client/stdio";

const sdkPackage = new URL("./node_modules/@modelcontextprotocol/client/package.json", import.meta.url);
const sdkVersion = JSON.parse(readFileSync(sdkPackage, "utf8")).version;

let row = null; // { client, selection, listening, closed }
const METHOD_NOT_FOUND = -32601;

function reply(id, answer) {
  process.stdout.write(JSON.stringify({ id, ...answer }) + "\n");
}

function describe(error) {
  return `${error?.name ?? "Error"}: ${error?.message ?? String(error)}`;
}

async function keepListening(state, uris) {
  // One listen for `uris` while the selection stays the same; again after it ends.
  while (!state.closed && state.selection === uris) {
    try {
      const sub = await state.client.listen({ resourceSubscriptions: uris, resourcesListChanged: true });
      if (state.closed || state.selection !== uris) {
        await sub.close();
        return;
      }
      state.listening = sub;
      await sub.closed;
    } catch (error) {
      // The server has no listen (JSON-RPC "method not found"): asking again changes nothing.
      if (error?.code === METHOD_NOT_FOUND) return;
      // lost, refused, or unreachable: try again shortly
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

function select(state, uris) {
  const previous = state.listening;
  state.selection = uris;
  state.listening = null;
  if (previous) previous.close().catch(() => {});
  if (uris.length) keepListening(state, uris);
}

async function open(message) {
  const timeouts = message.timeouts ?? {};
  const client = new Client(
    { name: "freshcache-driver", version: "0.1.0" },
    { versionNegotiation: { mode: "auto" } },
  );
  const transport =
    message.transport === "http"
      ? new StreamableHTTPClientTransport(new URL(message.url))
      : new StdioClientTransport({
          command: message.command[0],
          args: message.command.slice(1),
          env: { ...process.env },
          stderr: "inherit",
        });
  await client.connect(transport, { timeout: 1000 * (timeouts.read ?? 2) });
  const state = { client, selection: null, listening: null, closed: false, timeout: 1000 * (timeouts.read ?? 2) };
  row = state;
  if (message.transport === "stdio") {
    // The server process is gone and the SDK starts no other: tell the harness (the
    // `ended` notice), which then stops waiting for a listen that cannot come.
    const before = client.onclose;
    client.onclose = () => {
      before?.();
      if (!state.closed) {
        state.selection = null; // no listen again on a closed transport
        process.stdout.write(JSON.stringify({ ended: "the client's stdio transport closed" }) + "\n");
      }
    };
  }
  select(state, message.select ?? []);
}

async function read(message) {
  const timeout = message.timeout != null ? 1000 * message.timeout : row.timeout;
  try {
    const result = await row.client.readResource({ uri: message.uri }, { timeout });
    return { text: result.contents.map((part) => part.text ?? "").join("") };
  } catch (error) {
    return { error: describe(error) };
  }
}

async function list() {
  try {
    const result = await row.client.listResources(undefined, { timeout: row.timeout });
    return { uris: result.resources.map((r) => r.uri) };
  } catch (error) {
    return { error: describe(error) };
  }
}

async function close() {
  if (!row) return;
  const state = row;
  row = null;
  state.closed = true;
  if (state.listening) await state.listening.close().catch(() => {});
  await state.client.close().catch(() => {});
}

async function answer(message) {
  switch (message.op) {
    case "hello":
      return {
        protocol: 1,
        client: `typescript-sdk ${sdkVersion}`,
        states: false,
        transports: ["http", "stdio"],
        ops: ["read", "list", "select", "close"],
        listens: true,
        principals: false,
        policies: [],
      };
    case "open":
      if (row) return { protocol_error: "a row is open already: close it first" };
      await open(message);
      return { ok: true };
    case "close":
      await close();
      return { ok: true };
  }
  if (!row) return { protocol_error: `${JSON.stringify(message.op)} needs an open row` };
  switch (message.op) {
    case "read":
      return read(message);
    case "list":
      return list();
    case "select":
      select(row, message.uris);
      return { ok: true };
    default:
      return { protocol_error: `unknown or unsupported op ${JSON.stringify(message.op)}` };
  }
}

const lines = createInterface({ input: process.stdin });
lines.on("line", (line) => {
  if (!line.trim()) return;
  const message = JSON.parse(line);
  answer(message)
    .then((result) => reply(message.id, result))
    .catch((error) => reply(message.id, { protocol_error: describe(error) }));
});
lines.on("close", () => {
  close().finally(() => process.exit(0));
});
