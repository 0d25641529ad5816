// `codefleet mcp` driven by the official MCP TypeScript SDK
// (@modelcontextprotocol/sdk from npm), an independent client: it launches
// the server over stdio, negotiates its own protocol version (1.11.0 asks
// for 2025-03-26, current ones for a newer one), lists the tools and calls
// them, with a progress callback.  Run by ts_sdk.py, which starts the fleet
// and passes: the CLI, then its global options.  One line per check
// ("ok   ..." / "FAIL ..."), exit 1 on a failure.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const [cli, ...globals] = process.argv.slice(2);
let failures = 0;
const check = (cond, what) => {
  console.log((cond ? "ok   " : "FAIL ") + what);
  if (!cond) failures++;
};

const transport = new StdioClientTransport({
  command: cli,
  args: [...globals, "mcp", "--keep-alive", "1s"],
  env: process.env,
  stderr: "ignore",
});
const client = new Client({ name: "codefleet-ts-check", version: "1.0.0" });
try {
  await client.connect(transport);
  const info = client.getServerVersion();
  check(info && info.name === "codefleet", `connected, server ${JSON.stringify(info)}`);
  const tools = (await client.listTools()).tools;
  const names = tools.map((t) => t.name).sort();
  check(names.includes("execute_code") && names.includes("get_result"), `listTools: ${names}`);

  let r = await client.callTool({ name: "execute_code", arguments: { language: "python", code: "print(6 * 7)" } });
  let sc = r.structuredContent || {};
  check(!r.isError && sc.status === "success" && sc.stdout === "42\n", `execute_code: ${sc.status}`);

  // A tool error: its structuredContent must match the outputSchema too
  // (current SDKs validate it and would throw).
  r = await client.callTool({ name: "execute_code", arguments: { language: "cobol", code: "x" } });
  check(r.isError === true, "an unknown language is a tool error");

  // Output while it runs, as progress notifications.
  const seen = [];
  r = await client.callTool(
    { name: "execute_code", arguments: { language: "shell", code: "for i in 1 2 3; do echo tick $i; sleep 0.3; done" } },
    undefined,
    { onprogress: (p) => seen.push(p.message || ""), timeout: 120000 },
  );
  check((r.structuredContent || {}).status === "success", "a run with progress succeeds");
  check(seen.join("") === "tick 1\ntick 2\ntick 3\n", `progress carried the output: ${JSON.stringify(seen)}`);

  // Calls side by side, as agents make them: the first program waits for
  // a file the second makes, so served one at a time it would never end.
  const gate = `/tmp/cf-mcp-ts-${process.pid}-${Date.now()}.gate`;
  const [waiter, opener] = await Promise.all([
    client.callTool(
      { name: "execute_code", arguments: { language: "shell", timeout_ms: 120000,
        code: `while [ ! -e ${gate} ]; do sleep 0.05; done; echo saw the gate` } },
      undefined, { timeout: 180000 }),
    client.callTool({ name: "execute_code", arguments: { language: "shell", code: `touch ${gate}; echo opened` } },
      undefined, { timeout: 180000 }),
  ]);
  check((waiter.structuredContent || {}).stdout === "saw the gate\n" && (opener.structuredContent || {}).stdout === "opened\n",
        `parallel calls overlap: ${(waiter.structuredContent || {}).status}, ${(opener.structuredContent || {}).status}`);
  await import("node:fs").then((fs) => fs.promises.unlink(gate)).catch(() => {});

  // wait=false, then get_result.
  r = await client.callTool({ name: "execute_code", arguments: { language: "shell", code: "echo later", wait: false } });
  const id = (r.structuredContent || {}).id;
  check(typeof id === "string" && (r.structuredContent || {}).status === "submitted", "wait=false returns the id");
  r = await client.callTool({ name: "get_result", arguments: { id } });
  check((r.structuredContent || {}).stdout === "later\n", "get_result picks it up");

  // A quiet program longer than the client's timeout: keep-alive progress
  // restarts the SDK's timer (resetTimeoutOnProgress), so the call returns.
  r = await client.callTool(
    { name: "execute_code", arguments: { language: "shell", code: "sleep 12; echo quiet-done" } },
    undefined,
    { onprogress: () => {}, timeout: 8000, resetTimeoutOnProgress: true },
  );
  check((r.structuredContent || {}).stdout === "quiet-done\n", "keep-alive progress outlasted the client's 8 s timeout");

  // Without it the SDK times out and sends notifications/cancelled: that is
  // not the user's cancel, the program runs on and get_result picks it up.
  let timedOut = false;
  try {
    await client.callTool(
      { name: "execute_code", arguments: { language: "shell", code: "sleep 12; echo ran-on" } },
      undefined,
      { timeout: 5000 },
    );
  } catch (e) {
    timedOut = /timed out/i.test(String(e));
  }
  check(timedOut, "the SDK's own timeout fired");
  r = await client.callTool({ name: "get_result", arguments: { wait_timeout_ms: 120000 } }, undefined, { timeout: 130000 });
  check((r.structuredContent || {}).stdout === "ran-on\n", `get_result without an id picked it up: ${JSON.stringify(r.structuredContent)}`);
} catch (e) {
  check(false, `the session raised ${e && e.stack ? e.stack : e}`);
} finally {
  await client.close().catch(() => {});
}
console.log(`${failures} failure(s)`);
process.exit(failures ? 1 : 0);
