// One `tapeproxy serve` for this worker: found, started on a free port, read until its ready
// line, talked to over its control API, and stopped by its pid.
import { spawn, type ChildProcess } from "node:child_process";
import { accessSync, constants, statSync } from "node:fs";
import { request } from "node:http";
import { delimiter, join } from "node:path";

const READY = /ready on (http:\/\/\S+)/;
const START_TIMEOUT_MS = 60_000;
const STOP_TIMEOUT_MS = 15_000;
const LOG_LINES = 40; // kept to explain a server that stopped on its own
export const INSTALL_HINT =
  "tapeproxy: the tapeproxy server is not installed: `pip install tapeproxy` (or run the tests " +
  "in the tapeproxy image), or set TAPEPROXY_BIN to its command";

// The server's lifetime is tied to a pipe, not to an exit hook: vitest and jest end their
// workers without running `exit` handlers (a thread is terminated, a fork killed), but every
// way a worker ends closes its end of this pipe. The keeper sees the end of its stdin and
// stops the server (SIGTERM: cassettes complete on disk; SIGKILL past the timeout). It stops
// the server's whole process group, so that a TAPEPROXY_BIN that is a wrapper (a shell script,
// `uvx tapeproxy`) leaves no server behind it, and leaves once the group is gone.
const KEEPER = `
const { spawn } = require("node:child_process");
const [command, ...args] = process.argv.slice(1);
const server = spawn(command, args, { stdio: ["ignore", "inherit", "inherit"], detached: true });
let stopping = false;
let status = 0;
const group = (signal) => {
  try {
    process.kill(-server.pid, signal);
    return true;
  } catch {
    return false;
  }
};
const stop = () => {
  if (stopping || server.pid === undefined) return;
  stopping = true;
  group("SIGTERM");
  setTimeout(() => group("SIGKILL"), ${STOP_TIMEOUT_MS}).unref();
};
const leave = () => (group(0) ? setTimeout(leave, 100) : process.exit(status));
server.on("error", (error) => {
  process.stderr.write("tapeproxy-keeper: cannot run " + command + ": " + error.code + "\\n");
  process.exit(127);
});
server.on("exit", (code, signal) => {
  status = code ?? (signal ? 1 : 0);
  stop(); // what the command left running in its group
  leave();
});
process.stdin.on("end", stop).on("close", stop).on("error", stop).resume();
process.on("SIGTERM", stop).on("SIGINT", stop);
`;

/** An error that is all message: what went wrong and what to do, with no stack of ours below
 * it in a test's failure (the pytest plugin's `pytrace=False`). */
export function failure(message: string): Error {
  const error = new Error(message);
  error.stack = `Error: ${message}`;
  return error;
}

export interface ServerOptions {
  cassettes: string; // the library: a folder, a file:// or s3:// URL
  cwd: string; // where tapeproxy.toml is read from: the project's root
}

/** A running `tapeproxy serve`: its URL, and the control API calls a test suite makes. */
export class Server {
  /** The faults it started with (TAPEPROXY_FAULT, tapeproxy.toml): a test's, unless given. */
  faults: string[] = [];

  constructor(
    readonly url: string,
    private readonly keeper: ChildProcess,
    private readonly exited: Promise<void>,
    private readonly log: string[],
  ) {}

  get pid(): number | undefined {
    return this.keeper.pid;
  }

  /** GET or PUT a control endpoint (`cassette`, `faults`, `stats`, `misses`); its JSON. */
  async control<T>(endpoint: string, body?: unknown): Promise<T> {
    try {
      return (await controlCall(`${this.url}/__tapeproxy/${endpoint}`, body)) as T;
    } catch (error) {
      // A server that stopped in the middle of the run: say so, and what it said last, rather
      // than a bare ECONNREFUSED in every test that follows. (An answer of 4xx is no such.)
      if (!(error as NodeJS.ErrnoException).code) throw error;
      if (this.keeper.exitCode === null && this.keeper.signalCode === null) {
        await Promise.race([this.exited, delay(1_000)]);
      }
      const status = this.keeper.exitCode ?? this.keeper.signalCode;
      if (status === null) throw error;
      throw failure(`tapeproxy: the server stopped during the run (exit status ${status}):\n${this.log.join("\n")}`);
    }
  }

  /** Stop the server and wait for it: its pipe closed, the keeper stops it by its pid. */
  async stop(): Promise<void> {
    this.keeper.stdin?.end();
    await Promise.race([this.exited, delay(STOP_TIMEOUT_MS + 5_000)]);
  }
}

/** The command that runs tapeproxy: TAPEPROXY_BIN, else `tapeproxy` on PATH, else
 * `python3 -m tapeproxy` (the contract's order). TAPEPROXY_BIN is a path (spaces and all,
 * when that file is there) or a command and its words (`uvx tapeproxy`). */
export function tapeproxyCommand(env: NodeJS.ProcessEnv = process.env): string[] {
  const given = env.TAPEPROXY_BIN?.trim();
  if (given && isExecutable(given)) return [given];
  if (given) return given.split(/\s+/);
  const found = onPath("tapeproxy", env.PATH ?? "");
  return found ? [found] : ["python3", "-m", "tapeproxy"];
}

function onPath(name: string, path: string): string | undefined {
  for (const folder of path.split(delimiter)) {
    if (folder && isExecutable(join(folder, name))) return join(folder, name);
  }
  return undefined;
}

function isExecutable(path: string): boolean {
  try {
    accessSync(path, constants.X_OK);
    return statSync(path).isFile();
  } catch {
    return false;
  }
}

/** Start `tapeproxy serve` on a free loopback port, in replay until a test says otherwise,
 * and resolve once its ready line names its URL. */
export async function startServer(options: ServerOptions): Promise<Server> {
  const [command, ...args] = tapeproxyCommand();
  const serve = [
    ...args,
    "serve",
    "--host",
    "127.0.0.1",
    "--port",
    "0",
    "--mode",
    "replay",
    "--cassettes",
    options.cassettes,
  ];
  const keeper = spawn(process.execPath, ["-e", KEEPER, command!, ...serve], {
    cwd: options.cwd,
    stdio: ["pipe", "pipe", "pipe"],
    env: { ...process.env, NO_COLOR: "1" },
  });
  const log: string[] = [];
  const exited = new Promise<void>((resolve) => keeper.once("exit", () => resolve()));
  const url = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => {
      keeper.stdin?.end();
      reject(failure(`tapeproxy: the server printed no ready line in ${START_TIMEOUT_MS / 1000} s:\n${log.join("\n")}`));
    }, START_TIMEOUT_MS);
    const ready = (found: string) => {
      clearTimeout(timer);
      resolve(found);
    };
    readLines(keeper.stdout!, log, (line) => READY.exec(line)?.[1], ready);
    readLines(keeper.stderr!, log, () => undefined, ready);
    keeper.once("exit", (code) => {
      clearTimeout(timer);
      reject(failure(whyNotStarted(code, log)));
    });
  });
  // Running on: its logs are still drained (a full pipe would block the server), but
  // neither the keeper nor its pipes keep the test runner alive.
  for (const handle of [keeper, keeper.stdin, keeper.stdout, keeper.stderr]) {
    (handle as { unref?: () => void } | null)?.unref?.();
  }
  const server = new Server(url, keeper, exited, log);
  try {
    server.faults = (await server.control<{ faults: string[] }>("faults")).faults;
  } catch (error) {
    await server.stop();
    throw error;
  }
  return server;
}

function whyNotStarted(code: number | null, log: string[]): string {
  const text = log.join("\n");
  if (code === 127 || /No module named tapeproxy/.test(text)) return INSTALL_HINT;
  return `tapeproxy: the server stopped before it was ready (exit status ${code}):\n${text}`;
}

function readLines(
  stream: NodeJS.ReadableStream,
  log: string[],
  match: (line: string) => string | undefined,
  found: (url: string) => void,
): void {
  let rest = "";
  stream.setEncoding("utf8");
  stream.on("data", (chunk: string) => {
    const lines = (rest + chunk).split("\n");
    rest = lines.pop() ?? "";
    for (const line of lines) {
      log.push(line);
      if (log.length > LOG_LINES) log.shift();
      const url = match(line);
      if (url) found(url);
    }
  });
}

/** A control call over node:http, not fetch: a test that stubs or mocks global fetch must
 * not catch tapeproxy's own calls. With TAPEPROXY_ADMIN_TOKEN set the server wants it on a PUT. */
function controlCall(url: string, body?: unknown): Promise<unknown> {
  const payload = body === undefined ? undefined : JSON.stringify(body);
  const headers: Record<string, string> = payload === undefined ? {} : { "content-type": "application/json" };
  const token = process.env.TAPEPROXY_ADMIN_TOKEN;
  if (token) headers.authorization = `Bearer ${token}`;
  return new Promise((resolve, reject) => {
    const sent = request(
      url,
      { method: payload === undefined ? "GET" : "PUT", headers },
      (answer) => {
        let text = "";
        answer.setEncoding("utf8");
        answer.on("data", (chunk: string) => (text += chunk));
        answer.on("end", () => {
          if ((answer.statusCode ?? 500) >= 400) {
            reject(failure(`tapeproxy: ${url} answered ${answer.statusCode}: ${errorMessage(text)}`));
          } else {
            resolve(JSON.parse(text));
          }
        });
      },
    );
    sent.on("error", reject);
    sent.end(payload);
  });
}

function errorMessage(text: string): string {
  try {
    return JSON.parse(text).error.message ?? text;
  } catch {
    return text;
  }
}

function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms).unref());
}
