// The official TypeScript MCP SDK client (Streamable HTTP) against the URL it is given:
// list the tools, call two, print what it got as JSON (tests/e2e/test_mcp.py).
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const client = new Client({ name: "tapeproxy-node-test", version: "1.0.0" });
const transport = new StreamableHTTPClientTransport(new URL(process.argv[2]));
await client.connect(transport);
const tools = await client.listTools();
const added = await client.callTool({ name: "add", arguments: { a: 1, b: 2 } });
const weather = await client.callTool({ name: "get_weather", arguments: { city: "Oslo" } });
await transport.terminateSession();
await client.close();
console.log(JSON.stringify({ server: client.getServerVersion(), tools, added, weather }));
