#!/usr/bin/env node
// End-to-end test of agentbox's MCP server with the official TypeScript SDK
// (@modelcontextprotocol/sdk) as the client. Prints TAP; exit 1 when a test
// failed. Run by tests/integration/test_mcp.py for both transports:
//
//   node client.mjs stdio BIN DATA_DIR [CONFIG]   spawns `BIN --data DATA_DIR mcp [--config CONFIG]`
//   node client.mjs http URL [TOKEN]              Streamable HTTP against `agentbox serve` at URL/mcp
//
// Steps: connect (initialize), list the tools, create a box, run `bash`
// (echo hello), write_file then read_file, use the box by its keys, an
// unknown tool, list, delete.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

const [mode, ...rest] = process.argv.slice(2);
const CALL_TIMEOUT_MS = 180000; // box creation under ASan is slow

let n = 0;
let failed = 0;
function ok(cond, name, diag) {
  n++;
  console.log(`${cond ? 'ok' : 'not ok'} ${n} - ${mode}: ${name.replace(/#/g, '\\#')}`);
  if (!cond) {
    failed++;
    if (diag !== undefined) {
      const text = typeof diag === 'string' ? diag : JSON.stringify(diag, null, 1);
      for (const line of text.slice(0, 2000).split('\n')) console.log(`# ${line}`);
    }
  }
  return cond;
}
function text(res) {
  return (res?.content ?? []).filter((c) => c.type === 'text').map((c) => c.text).join('');
}
function bail(why) {
  console.log(`Bail out! ${mode}: ${why}`.replace(/\n/g, ' '));
  process.exit(1);
}

let transport;
if (mode === 'stdio') {
  const [bin, data, config] = rest;
  if (!bin || !data) bail('usage: client.mjs stdio BIN DATA_DIR [CONFIG]');
  const env = {};
  for (const [k, v] of Object.entries(process.env)) if (v !== undefined) env[k] = v;
  transport = new StdioClientTransport({
    command: bin,
    args: ['--data', data, 'mcp', ...(config ? ['--config', config] : [])],
    env,
    stderr: 'inherit',
  });
} else if (mode === 'http') {
  const [url, token] = rest;
  if (!url) bail('usage: client.mjs http URL [TOKEN]');
  const headers = token ? { Authorization: `Bearer ${token}` } : {};
  transport = new StreamableHTTPClientTransport(new URL('/mcp', url), { requestInit: { headers } });
} else {
  bail(`unknown transport "${mode}" (stdio or http)`);
}

const client = new Client({ name: 'agentbox-e2e', version: '1.0.0' });
try {
  await client.connect(transport, { timeout: CALL_TIMEOUT_MS });
} catch (e) {
  bail(`connect failed: ${e?.stack ?? e}`);
}
ok(true, 'connect (initialize + initialized)');
const info = client.getServerVersion();
ok(info?.name === 'agentbox' && typeof info?.version === 'string', 'serverInfo names agentbox', info);
ok(client.getServerCapabilities()?.tools !== undefined, 'capabilities include tools', client.getServerCapabilities());
if (mode === 'http') ok(typeof transport.sessionId === 'string' && transport.sessionId.length > 0, 'an Mcp-Session-Id was issued', transport.sessionId);

const call = (name, args) => client.callTool({ name, arguments: args }, undefined, { timeout: CALL_TIMEOUT_MS });

try {
  const { tools } = await client.listTools();
  const names = tools.map((t) => t.name);
  for (const want of ['sandbox_create', 'sandbox_list', 'sandbox_stop', 'sandbox_delete', 'bash', 'read_file', 'write_file']) {
    ok(names.includes(want), `tools/list has ${want}`, names);
  }
  const bash = tools.find((t) => t.name === 'bash');
  ok(bash?.inputSchema?.type === 'object' && bash.inputSchema.properties?.sandbox_id && bash.inputSchema.properties?.command,
    'bash takes command and sandbox_id', bash);

  const keys = { app_id: 'mcp-e2e', user_id: 'u1', chat_id: `${mode}-${process.pid}` };
  const created = await call('sandbox_create', keys);
  let box;
  try {
    box = JSON.parse(text(created));
  } catch {
    box = null;
  }
  ok(!created.isError && box?.status === 'running' && typeof box?.id === 'string', 'sandbox_create gives a running box', created);
  const id = box?.id;

  const hello = await call('bash', { sandbox_id: id, command: 'echo hello' });
  ok(!hello.isError && text(hello).includes('hello'), 'bash echo hello -> hello', hello);

  const path = '/workspace/mcp-e2e/notes.txt';
  const content = `written over ${mode}\nsecond line\n`;
  const wrote = await call('write_file', { sandbox_id: id, path, content });
  ok(!wrote.isError && text(wrote).trim() === 'OK', 'write_file -> OK', wrote);
  const read = await call('read_file', { sandbox_id: id, path });
  ok(!read.isError && text(read).includes(`written over ${mode}`) && text(read).includes('second line'),
    'read_file gives back what write_file wrote', read);

  const byKeys = await call('bash', { ...keys, command: `cat ${path}` });
  ok(!byKeys.isError && text(byKeys).includes(`written over ${mode}`), 'bash by keys (no sandbox_id) runs in the same box', byKeys);

  const noBox = await call('bash', { command: 'true' });
  ok(noBox.isError === true && /sandbox_id/.test(text(noBox)), 'an agent tool without a box is an error result naming sandbox_id', noBox);

  let unknown;
  try {
    unknown = await call('no_such_tool', {});
  } catch (e) {
    unknown = e;
  }
  ok(unknown instanceof Error ? /no_such_tool/.test(unknown.message) : unknown?.isError === true,
    'an unknown tool is refused (JSON-RPC error or isError)', String(unknown?.message ?? JSON.stringify(unknown)));

  const listed = await call('sandbox_list', { app_id: 'mcp-e2e' });
  let list = null;
  try {
    list = JSON.parse(text(listed)).sandboxes;
  } catch {
    list = null;
  }
  ok(Array.isArray(list) && list.some((b) => b.id === id), 'sandbox_list shows the box', listed);

  const del = await call('sandbox_delete', { sandbox_id: id });
  ok(!del.isError, 'sandbox_delete', del);

  const ping = await client.ping();
  ok(ping !== undefined, 'ping');
} catch (e) {
  ok(false, 'no exception from the SDK', String(e?.stack ?? e));
}

if (mode === 'http') {
  try {
    await transport.terminateSession();
    ok(transport.sessionId === undefined, 'DELETE /mcp ends the session');
  } catch (e) {
    ok(false, 'DELETE /mcp ends the session', String(e?.stack ?? e));
  }
}
await client.close();
console.log(`1..${n}`);
process.exit(failed ? 1 : 0);
