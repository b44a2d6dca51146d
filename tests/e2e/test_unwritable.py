"""A cassette library that cannot take recordings: a recording mode refuses to start, and a
recording lost during the run makes the shutdown fail; the --ready-file a health check reads."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

import httpx
import pytest

from tests.fakes.upstream import FakeUpstream
from tests.support.serve import ROOT, TAPEPROXY, Serve

EMBEDDING = {"model": "m", "input": "x"}


def serve_once(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """`tapeproxy serve ARGS` expected to stop by itself (it must not start)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TAPEPROXY_")}
    return subprocess.run(
        [*TAPEPROXY, "serve", "--port", "0", *args],
        cwd=cwd,
        env={**env, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
    )


def blocked_library(tmp_path: Path) -> Path:
    """A library folder nobody can create, not even root: a regular file is in the way."""
    (tmp_path / "plain-file").write_text("not a folder\n")
    return tmp_path / "plain-file" / "cassettes"


@pytest.mark.parametrize(
    "mode", [["--mode", "record"], ["--mode", "auto"], ["--mode", "once"], ["--live", "openai"]]
)
def test_a_recording_mode_refuses_to_start_on_a_library_it_cannot_write(
    tmp_path: Path, mode: list[str]
) -> None:
    library = blocked_library(tmp_path)
    result = serve_once([*mode, "--cassettes", str(library)], tmp_path)
    assert result.returncode == 1, result.stderr
    assert "ready on" not in result.stdout
    assert "cannot record into the cassette library" in result.stderr
    assert f"uid {os.getuid()} (gid {os.getgid()}) needs write access to {library}" in (
        result.stderr
    )


@pytest.mark.skipif(os.getuid() == 0, reason="root writes into a read-only folder anyway")
def test_a_read_only_library_is_refused_naming_the_uid_and_the_owner(tmp_path: Path) -> None:
    library = tmp_path / "cassettes"
    library.mkdir()
    library.chmod(0o555)
    try:
        result = serve_once(["--mode", "record", "--cassettes", str(library)], tmp_path)
    finally:
        library.chmod(0o755)
    assert result.returncode == 1, result.stderr
    assert "Permission denied" in result.stderr
    assert f"uid {os.getuid()}" in result.stderr and f"belongs to uid {os.getuid()}" in (
        result.stderr
    )


def mounts_work() -> bool:
    """Whether this machine lets a test mount file systems in a mount namespace of its own
    (root, or CAP_SYS_ADMIN, and util-linux's `unshare`): nothing is mounted outside it."""
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "mount", "-t", "tmpfs", "tmpfs", "/mnt"],
        capture_output=True,
        timeout=30,
    )
    return probe.returncode == 0


def serve_in_own_mounts(
    mounts: str, args: list[str], cwd: Path
) -> subprocess.CompletedProcess[str]:
    """`tapeproxy serve ARGS` after the shell commands `mounts`, in a mount namespace of its
    own: the read-only mounts vanish with it, whatever happens."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TAPEPROXY_")}
    own = ["unshare", "--mount", "--propagation", "private", "sh", "-ec", f'{mounts}\nexec "$@"']
    return subprocess.run(
        [*own, "sh", *TAPEPROXY, "serve", "--port", "0", *args],
        cwd=cwd,
        env={**env, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.skipif(not mounts_work(), reason="cannot mount a read-only file system here")
@pytest.mark.parametrize("read_only", ["library", "cassette"])
def test_a_library_on_a_read_only_mount_is_refused_saying_so_not_asking_for_chown(
    tmp_path: Path, read_only: str
) -> None:
    """A real read-only mount (a tmpfs mounted ro; a cassette folder bind-mounted and
    remounted ro in a writable library, as Docker's `:ro` does): no owner or mode change
    can help, so the message says EROFS and gives no chown advice."""
    library = tmp_path / "cassettes"
    cassette = library / "default"
    cassette.mkdir(parents=True)
    mounts = {
        "library": f"mount -t tmpfs -o ro tmpfs {library}",
        "cassette": f"mount --bind {cassette} {cassette}\nmount -o remount,bind,ro {cassette}",
    }[read_only]
    result = serve_in_own_mounts(
        mounts, ["--mode", "record", "--cassettes", str(library)], tmp_path
    )
    assert result.returncode == 1, result.stderr
    assert "ready on" not in result.stdout
    where = library if read_only == "library" else cassette
    assert f"{where} is on a read-only file system (EROFS)" in result.stderr
    assert "chown" not in result.stderr and "--user" not in result.stderr


def test_replay_never_writes_so_it_starts_on_any_library(tmp_path: Path) -> None:
    serve = Serve(["--cassettes", str(blocked_library(tmp_path))], tmp_path)
    assert "replay ready on" in serve.ready
    code, err = serve.stop()
    assert code == 0, err


def test_the_write_check_creates_the_library_and_leaves_nothing_in_it(tmp_path: Path) -> None:
    library = tmp_path / "new" / "cassettes"
    (library.parent).mkdir()
    serve = Serve(["--mode", "record", "--cassettes", str(library)], tmp_path)
    assert "record ready on" in serve.ready
    assert library.is_dir() and list(library.iterdir()) == []
    code, err = serve.stop()
    assert code == 0, err


def test_a_recording_that_cannot_be_written_makes_the_shutdown_exit_4(
    tmp_path: Path, fake: FakeUpstream
) -> None:
    library = tmp_path / "cassettes"
    serve = Serve(
        ["--mode", "record", "--cassettes", str(library), "--upstream", f"openai={fake.url}"],
        tmp_path,
    )
    # The cassette folder is a link to nowhere: it reads as empty, and no write gets through.
    (library / "default").symlink_to(tmp_path / "gone" / "default")
    answer = httpx.post(serve.url + "/openai/v1/embeddings", json=EMBEDDING, timeout=30)
    assert answer.status_code == 200, "the client still gets its answer"
    stats = httpx.get(serve.url + "/__tapeproxy/stats", timeout=10).json()
    assert (stats["recorded"], stats["write_failures"], stats["errors"]) == (0, 1, 1)
    code, err = serve.stop(signal.SIGTERM)
    assert code == 4, err
    assert "could not write to cassette 'default'" in err
    assert f"1 recording(s) could not be written into {library} and are lost" in err


def test_the_ready_file_holds_the_url_while_it_serves_and_goes_at_exit(tmp_path: Path) -> None:
    ready_file = tmp_path / "run" / "tapeproxy.url"
    serve = Serve(["--ready-file", str(ready_file)], tmp_path)
    assert ready_file.read_text() == serve.url + "\n"
    assert httpx.get(ready_file.read_text().strip() + "/__tapeproxy/health", timeout=10).is_success
    code, err = serve.stop()
    assert code == 0, err
    assert not ready_file.exists()


def test_a_ready_file_it_cannot_write_stops_it_with_status_1(tmp_path: Path) -> None:
    ready_file = blocked_library(tmp_path) / "tapeproxy.url"
    result = serve_once(["--ready-file", str(ready_file)], tmp_path)
    assert result.returncode == 1, result.stderr
    assert f"could not write --ready-file {ready_file}" in result.stderr
    assert "ready on" not in result.stdout
