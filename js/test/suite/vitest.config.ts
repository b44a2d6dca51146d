import { defineConfig } from "vitest/config";

// The SDK suite, run by the meta-tests (test/suite.test.ts) with the fake provider up or
// down and TAPEPROXY_MODE once or replay.
export default defineConfig({ test: { include: ["test/suite/*.test.ts"], testTimeout: 30_000 } });
