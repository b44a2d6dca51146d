// What a test runner's hooks do with the worker's server, whichever the runner: a test begins
// on its own cassette, mode and faults with its base URLs set; it ends with a verdict on what
// missed its cassette.
import { cassetteForTest, cassetteLibrary, libraryPrefix, nodeId, projectRoot } from "./naming.js";
import { failure, startServer, type Server } from "./server.js";

export const MODES = ["record", "replay", "auto", "once", "passthrough"] as const;
export type Mode = (typeof MODES)[number];

export interface TapeproxyOptions {
  /** The cassette of every test here, shared (default: one per test, from its file and title). */
  cassette?: string;
  /** The mode of every test here; TAPEPROXY_MODE wins (default: replay). */
  mode?: Mode;
  /** Fault specs (as `tapeproxy serve --fault` takes) in force at the start of every test. */
  faults?: string[];
}

/** The upstreams whose SDK variables are set, with what an SDK's base URL adds. */
const BASE_URLS: Record<string, [string, string]> = {
  OPENAI_BASE_URL: ["openai", "/v1"],
  ANTHROPIC_BASE_URL: ["anthropic", ""],
};
/** Replay needs no key, but the SDKs want one: set for each that is unset. */
const REPLAY_KEYS: Record<string, string> = {
  OPENAI_API_KEY: "sk-tapeproxy-replay",
  ANTHROPIC_API_KEY: "sk-ant-tapeproxy-replay",
};
const MISSES_SHOWN = 5;
export const CONCURRENT =
  "tapeproxy: tests that run at once (test.concurrent, describe.concurrent) are not supported: " +
  "a worker's server has one cassette at a time; run this file's tests one after another";

interface Stats {
  misses: number; // since the server started
}
interface Misses {
  misses: { message: string }[]; // the journal, newest first
}

/** The test as the runner names it: its file and its describe blocks and title. */
export interface TestName {
  file: string;
  titles: string[];
}

interface Running {
  cassette: string;
  mode: Mode;
  missesBefore: number;
  saved: Record<string, string | undefined>;
}

/** This test file's tapeproxy: the worker's server and the test running now. */
export class Tapeproxy {
  readonly root = projectRoot();
  readonly cassettes = cassetteLibrary(this.root);
  private server: Server | undefined;
  private running: Running | undefined;

  constructor(private readonly options: TapeproxyOptions = {}) {}

  /** The server's URL (`http://127.0.0.1:PORT`). */
  get url(): string {
    return this.live().url;
  }
  /** The running test's cassette. */
  get cassette(): string {
    return this.now().cassette;
  }
  /** The running test's mode. */
  get mode(): Mode {
    return this.now().mode;
  }

  /** The base URL an SDK of `upstream` takes: `.../openai/v1`, `.../anthropic`, ... */
  baseUrl(upstream: string): string {
    return `${this.url}/${upstream}${upstream === "openai" ? "/v1" : ""}`;
  }

  /** Faults from now on in this test (a new run of them; `[]` clears them). */
  async faults(specs: string[]): Promise<void> {
    await this.live().control("faults", { faults: specs });
  }

  /** Attach to the worker's server, starting it if this worker has none yet. */
  async attach(worker: { server?: Promise<Server> }): Promise<void> {
    worker.server ??= startServer({ cassettes: this.cassettes, cwd: this.root });
    try {
      this.server = await worker.server;
    } catch (error) {
      worker.server = undefined; // the next file tries again, and says why again
      throw error;
    }
  }

  async detach(): Promise<void> {
    const server = this.server;
    this.server = undefined;
    await server?.stop();
  }

  /** Switch the server to this test's cassette, mode and faults, and point the SDKs at it. */
  async begin(test: TestName): Promise<void> {
    // Two tests at once would share the server's one cassette, and the second would save the
    // first's base URLs and placeholder keys as the ones to put back: refused, in one line.
    if (this.running) throw failure(CONCURRENT);
    const server = this.live();
    const cassette = this.options.cassette ?? this.nameOf(test);
    const mode = chooseMode(process.env.TAPEPROXY_MODE, this.options.mode);
    await server.control("cassette", { cassette, mode });
    await server.control("faults", { faults: this.options.faults ?? server.faults });
    const missesBefore = (await server.control<Stats>("stats")).misses;
    const saved: Record<string, string | undefined> = {};
    const set = (name: string, value: string) => {
      if (!(name in saved)) saved[name] = process.env[name];
      process.env[name] = value;
    };
    for (const [name, [upstream]] of Object.entries(BASE_URLS)) set(name, this.baseUrl(upstream));
    if (mode === "replay") {
      for (const [name, key] of Object.entries(REPLAY_KEYS)) if (!process.env[name]) set(name, key);
    }
    this.running = { cassette, mode, missesBefore, saved };
  }

  /** Put the environment back, and the miss report of what missed the cassette, if any. */
  async end(): Promise<string | undefined> {
    const running = this.running;
    this.running = undefined;
    if (!running || !this.server) return undefined;
    for (const [name, value] of Object.entries(running.saved)) {
      if (value === undefined) delete process.env[name];
      else process.env[name] = value;
    }
    const count = (await this.server.control<Stats>("stats")).misses - running.missesBefore;
    if (count <= 0) return undefined;
    const journal = (await this.server.control<Misses>("misses")).misses;
    const messages = journal.slice(0, count).reverse().map((miss) => miss.message);
    while (messages.length < count) messages.push("(a miss no longer in the journal: see the log)");
    const more = count - MISSES_SHOWN;
    return (
      `tapeproxy: ${count} request(s) missed cassette '${running.cassette}' ` +
      `(mode ${running.mode}, in ${this.cassettes}):\n` +
      messages.slice(0, MISSES_SHOWN).join("\n\n") +
      (more > 0 ? `\n... and ${more} more` : "") +
      "\nTAPEPROXY_MODE=record records the test anew, auto adds to it."
    );
  }

  private nameOf(test: TestName): string {
    const prefix = libraryPrefix(this.root, this.cassettes);
    return cassetteForTest(nodeId(this.root, test.file, test.titles), prefix);
  }

  private live(): Server {
    if (!this.server) throw failure("tapeproxy: no server yet: call useTapeproxy() at the top of the test file or in a setup file");
    return this.server;
  }

  private now(): Running {
    if (!this.running) throw failure("tapeproxy: no test is running");
    return this.running;
  }
}

function chooseMode(forced: string | undefined, marked: Mode | undefined): Mode {
  const mode = forced?.trim() || marked || "replay";
  if (!(MODES as readonly string[]).includes(mode)) {
    throw failure(`tapeproxy: TAPEPROXY_MODE=${mode}: use one of ${MODES.join(", ")}`);
  }
  return mode as Mode;
}
