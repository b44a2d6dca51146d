// The jest suite, run by test/jest.test.ts: tapeproxy from a setupFilesAfterEnv file, the
// package's CommonJS build (`require("tapeproxy/jest")`), no transform.
module.exports = {
  rootDir: __dirname,
  testMatch: ["<rootDir>/*.test.cjs"],
  setupFilesAfterEnv: ["<rootDir>/setup.cjs"],
  transform: {},
  testTimeout: 30000,
};
