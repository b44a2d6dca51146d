// Where a test's cassette lives: the project's root, the cassette library, and the cassette's
// name, slugged the way the pytest plugin slugs node ids (tapeproxy.store.names).
import { createHash } from "node:crypto";
import { existsSync } from "node:fs";
import { dirname, isAbsolute, join, relative, resolve, sep } from "node:path";

const UNSAFE = /[^A-Za-z0-9._-]+/g;
const MAX_NAME = 200;
const SOURCE_EXTENSION = /\.[cm]?[jt]sx?$/;
export const DEFAULT_CASSETTES = "tests/cassettes";

/** The folder of the nearest package.json at or above `from`: the project's root. */
export function projectRoot(from: string = process.cwd()): string {
  for (let folder = resolve(from); ; folder = dirname(folder)) {
    if (existsSync(join(folder, "package.json"))) return folder;
    if (dirname(folder) === folder) return resolve(from);
  }
}

/** The cassette library: TAPEPROXY_CASSETTES (a folder relative to the root, or a URL),
 * else tests/cassettes beside the project's package.json. */
export function cassetteLibrary(root: string, given = process.env.TAPEPROXY_CASSETTES): string {
  const library = given?.trim() || DEFAULT_CASSETTES;
  if (/^[a-z][a-z0-9+.-]*:\/\//i.test(library)) return library;
  return isAbsolute(library) ? library : join(root, library);
}

/** The folder that holds the library, relative to the root (`tests` for tests/cassettes):
 * test files under it are named without it. None for a URL or a library outside the root. */
export function libraryPrefix(root: string, library: string): string | undefined {
  if (!isAbsolute(library)) return undefined;
  const parent = relative(root, dirname(library));
  if (parent.startsWith("..") || isAbsolute(parent)) return undefined;
  return parent.split(sep).join("/") || ".";
}

/** The node id of a test, as pytest would write it: `path/to/file.test.ts::Describe::title`. */
export function nodeId(root: string, file: string, titles: string[]): string {
  const path = relative(root, file).split(sep).join("/");
  return [path, ...titles].join("::");
}

/** A test's title or describe block's name at its place in the file: the name, or, for the
 * n-th (n > 1) of its parent's children of that name (`test.each` without a `%` in its title,
 * a title written twice), `name[n]`, so that two tests never share a node id or a cassette
 * (pytest's node ids are unique: `test_b[0]`, `test_b[1]`). The first keeps the plain name. */
export function distinctTitle<T extends { name: string }>(node: T, siblings: readonly T[]): string {
  let n = 0;
  for (const sibling of siblings) {
    if (sibling.name === node.name) n += 1;
    if (sibling === node) break;
  }
  return n > 1 ? `${node.name}[${n}]` : node.name;
}

/** A cassette name for a test: `tests/chat.test.ts::Chat::answers` ->
 * `chat.test/Chat/answers` when the library is under `tests` (`prefix`). Characters a
 * cassette name cannot hold become `_`, and then, as does a name cut to MAX_NAME, it gets a
 * short hash of the node id so two tests never share a cassette (tapeproxy's
 * `cassette_for_test`, with a JS or TS file's extension where it drops `.py`). */
export function cassetteForTest(id: string, prefix?: string): string {
  const [file = "", ...names] = id.split("::");
  let path = file.replace(SOURCE_EXTENSION, "").replace(/\.py$/, "");
  if (prefix && prefix !== "." && path.startsWith(prefix + "/")) path = path.slice(prefix.length + 1);
  const segments = [...path.split("/"), ...names];
  const last = segments[segments.length - 1]!;
  if (last.endsWith("]") && last.includes("[")) {
    const at = last.indexOf("[");
    segments[segments.length - 1] = `${last.slice(0, at)}.${last.slice(at + 1, -1)}`;
  }
  const safe = segments.map((segment) => segment.replace(UNSAFE, "_").replace(/^\.+/, "") || "_");
  let name = safe.join("/");
  const digest = createHash("sha256").update(id).digest("hex").slice(0, 8);
  if (safe.some((segment, i) => segment !== segments[i]) || name.length > MAX_NAME) {
    name = name.slice(0, MAX_NAME - digest.length - 1).replace(/\/+$/, "") + "-" + digest;
  }
  return name;
}
