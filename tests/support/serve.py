"""`tapeproxy serve` as a user runs it, in a process of its own: started, its ready line read,
stopped by a signal."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

TAPEPROXY = [sys.executable, "-m", "tapeproxy"]
ROOT = Path(__file__).resolve().parents[2]  # the repository


class Serve:
    def __init__(self, args: list[str], cwd: Path, env: dict[str, str] | None = None) -> None:
        environ = {k: v for k, v in os.environ.items() if not k.startswith("TAPEPROXY_")}
        environ["PYTHONPATH"] = str(ROOT)
        environ.update(env or {})
        self.process = subprocess.Popen(
            [*TAPEPROXY, "serve", "--port", "0", *args],
            cwd=cwd,
            env=environ,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        self.ready = self.process.stdout.readline()
        self.url = self.ready.split("ready on ")[-1].strip()

    def stop(self, sig: int = signal.SIGTERM) -> tuple[int, str]:
        self.process.send_signal(sig)
        _, err = self.process.communicate(timeout=30)
        return self.process.returncode, err
