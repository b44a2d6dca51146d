"""The throughput driver: `wrk` (C, keep-alive, one thread) posting a rotating set of bodies,
its latency percentiles read back from a Lua `done()` hook as one JSON line."""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

INSTALL_HINT = (
    "install it with `sudo apt-get install -y wrk` (Debian/Ubuntu) or `bash bench/setup.sh`"
)

# Per wrk thread: the requests are formatted once in init(), then sent round-robin.
LUA = """
local bodies = {%(bodies)s}
local headers = {%(headers)s}
local path = %(path)s
local requests = {}
local n = 0
init = function(args)
  for i, body in ipairs(bodies) do
    requests[i] = wrk.format("POST", path, headers, body)
  end
end
request = function()
  n = n + 1
  return requests[(n %% #requests) + 1]
end
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'WRKRESULT {"requests":%%d,"duration_us":%%d,"socket_errors":%%d,"non2xx":%%d,' ..
    '"p50_us":%%d,"p99_us":%%d,"mean_us":%%.1f}\\n',
    summary.requests, summary.duration, e.connect + e.read + e.write + e.timeout, e.status,
    latency:percentile(50), latency:percentile(99), latency.mean))
end
"""


@dataclass(frozen=True)
class WrkResult:
    requests: int
    seconds: float
    errors: int  # socket errors and non-2xx/3xx answers
    p50_ms: float
    p99_ms: float

    @property
    def rate(self) -> float:
        return self.requests / self.seconds if self.seconds > 0 else 0.0


def wrk_path() -> str | None:
    return shutil.which("wrk")


def _lua_string(data: bytes) -> str:
    """A Lua string literal holding exactly `data`."""
    out = []
    for byte in data:
        char = chr(byte)
        if 32 <= byte < 127 and char not in '"\\':
            out.append(char)
        else:
            out.append(f"\\{byte:03d}")
    return '"' + "".join(out) + '"'


def script(path: str, bodies: list[bytes], headers: dict[str, str]) -> str:
    return LUA % {
        "bodies": ", ".join(_lua_string(body) for body in bodies),
        "headers": ", ".join(
            f"[{_lua_string(k.encode())}] = {_lua_string(v.encode())}" for k, v in headers.items()
        ),
        "path": _lua_string(path.encode()),
    }


def run_wrk(
    url: str,
    path: str,
    bodies: list[bytes],
    connections: int,
    seconds: float,
    headers: dict[str, str] | None = None,
) -> WrkResult:
    """`connections` keep-alive connections from one wrk thread for `seconds`, POSTing
    `bodies` round-robin to `url` + `path`."""
    binary = wrk_path()
    if binary is None:
        raise RuntimeError(f"wrk is not installed: {INSTALL_HINT}")
    sent = {"Content-Type": "application/json", **(headers or {})}
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as lua:
        lua.write(script(path, bodies, sent))
    try:
        argv = [binary, "-t1", f"-c{connections}", f"-d{max(seconds, 1):.0f}s", "--timeout", "10s"]
        done = subprocess.run(
            [*argv, "-s", lua.name, url + path],
            capture_output=True,
            text=True,
            timeout=seconds + 60,
            check=False,
        )
    finally:
        Path(lua.name).unlink(missing_ok=True)
    line = next((x for x in done.stdout.splitlines() if x.startswith("WRKRESULT ")), None)
    if line is None:
        raise RuntimeError(f"wrk printed no result (exit {done.returncode}): {done.stderr[-500:]}")
    data = json.loads(line.split(" ", 1)[1])
    return WrkResult(
        requests=data["requests"],
        seconds=data["duration_us"] / 1e6,
        errors=data["socket_errors"] + data["non2xx"],
        p50_ms=data["p50_us"] / 1000,
        p99_ms=data["p99_us"] / 1000,
    )
