// Talkback (npm `talkback`), the peer the benchmark compares tapeproxy with.
//   node bench/talkback.js UPSTREAM_URL TAPES_DIR RECORD_MODE   (NEW | OVERWRITE | DISABLED)
// Installed by bench/setup.sh into bench/.peers; prints `talkback ready on URL`.
const http = require("http");
const path = require("path");
const talkback = require(path.join(__dirname, ".peers", "node_modules", "talkback"));

// Talkback listens on every interface; the benchmark keeps all traffic on loopback.
const listen = http.Server.prototype.listen;
http.Server.prototype.listen = function (port, callback) {
  return listen.call(this, port, "127.0.0.1", callback);
};

const [upstream, tapes, record] = process.argv.slice(2);
const server = talkback({
  host: upstream,
  path: tapes,
  port: 0,
  record: record,
  fallbackMode: "NOT_FOUND",
  allowHeaders: ["content-type"], // match like tapeproxy: method, path, body
  silent: true,
  summary: false,
});
server.start(() => {
  const port = server.server.address().port;
  console.log(`talkback ready on http://127.0.0.1:${port}`);
});
process.on("SIGTERM", () => process.exit(0));
