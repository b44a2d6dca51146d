import { defineConfig } from "vitest/config";

// `npm test`: the meta-tests, which run the SDK suites (test/suite, test/jest) and the
// fixtures (test/fixtures) as subprocesses against the fake provider and real servers.
export default defineConfig({
  test: { include: ["test/*.test.ts"], testTimeout: 180_000, hookTimeout: 60_000, fileParallelism: false },
});
