"""A private local Ray that successive ``raytile`` commands share: ``raytile ray start | status | stop``.

Each ``raytile run``, ``demo`` or ``serve`` without ``--address`` starts a Ray
of its own (5-10 s on a busy machine) and stops it when it ends. ``raytile ray
start`` starts one Ray in a background process of its own (the *session
host*) and notes where it is in a session file; the commands find that file
and join that Ray instead (they still start their own worker actors, which
end with them). The host stops its Ray on ``raytile ray stop`` (SIGTERM) or
when no other driver has been connected for ``idle_s`` seconds.

The session file (``ray-session.json`` in :func:`session_dir`) is readable by
its owner alone (0600, its folder 0700). It holds the Ray's GCS address, the
host's pid and the Ray's authentication token: a Ray that raytile starts keeps
Ray's token authentication, and a driver that joins it by its address must
present the token (Ray finds it by itself only for ``address="auto"``). The
token is never printed. A file whose host is gone (killed, machine restarted) is found stale,
said so in one line, and removed: the command then starts a Ray of its own.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable

from raytile.common.errors import ConfigValidationError, ExecutorError

__all__ = ["RaySession", "session_dir", "session_path", "read_session", "find_session", "start_session",
           "stop_session", "command_address", "DEFAULT_IDLE_S"]

log = logging.getLogger(__name__)

#: A session's Ray stops after this long without another driver connected (seconds).
DEFAULT_IDLE_S = 900.0
#: How often the host looks for connected drivers.
IDLE_POLL_S = 1.0
SESSION_FILE = "ray-session.json"


@dataclasses.dataclass(frozen=True)
class RaySession:
    """A running session: its Ray's GCS ``address``, the host's ``pid``, its idle limit, when it started."""

    address: str
    pid: int
    idle_s: float
    started_at: float
    cpus: int | None = None
    gpus: int | None = None
    #: the Ray's authentication token (Ray's token authentication): never printed, not in the repr
    token: str | None = dataclasses.field(default=None, repr=False)


def session_dir() -> Path:
    """Where the session file lives: ``RAYTILE_RUNTIME_DIR``, else ``$XDG_RUNTIME_DIR/raytile``, else
    ``~/.cache/raytile/run`` (made 0700)."""
    env = os.environ.get("RAYTILE_RUNTIME_DIR")
    if env:
        path = Path(env)
    elif os.environ.get("XDG_RUNTIME_DIR"):
        path = Path(os.environ["XDG_RUNTIME_DIR"]) / "raytile"
    else:
        path = Path.home() / ".cache" / "raytile" / "run"
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    return path


def session_path() -> Path:
    return session_dir() / SESSION_FILE


def read_session(path: Path | None = None) -> RaySession | None:
    """The session the file records, alive or not; None without a (readable) file."""
    path = path or session_path()
    try:
        return RaySession(**json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process reuses the pid: not our host
        return False
    try:  # a zombie (ended, not yet reaped by its parent) is not alive
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


def find_session(say: Callable[[str], None] | None = None) -> RaySession | None:
    """The running session, or None; a stale file (its host gone) is removed, and ``say`` told why."""
    path = session_path()
    session = read_session(path)
    if session is None:
        return None
    if _alive(session.pid):
        return session
    _remove(path, session.pid)
    if say is not None:
        say(f"note: the shared Ray session recorded in {path} is gone (its host process {session.pid} ended); "
            "this command starts a Ray of its own (`raytile ray start` starts a new session)")
    return None


def command_address(address: str | None, say: Callable[[str], None] | None = None) -> str:
    """The Ray a command uses: ``address`` if given, else the running session's (said in one line),
    else ``"local"`` (a private Ray of the command's own)."""
    if address is not None:
        return address
    session = find_session(say)
    if session is None:
        return "local"
    if say is not None:
        say(f"using the shared Ray session at {session.address} (`raytile ray stop` stops it)")
    _use_token(session)
    return session.address


def _use_token(session: RaySession) -> None:
    """Let this process's Ray connection present the session's token (unless one is set already)."""
    if session.token is None or os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH"):
        return
    os.environ["RAY_AUTH_TOKEN"] = session.token
    from raytile.actors.ray_start import _enable_token_auth_for_client, without_token_notice

    with without_token_notice():  # the session's own token: Ray's notice about it is not for the user
        _enable_token_auth_for_client()


def _ray_token() -> str | None:
    """The token of the Ray this process started, where Ray takes it from (its environment variables,
    else its default file), or None."""
    if os.environ.get("RAY_AUTH_MODE", "token").lower() != "token":
        return None
    if os.environ.get("RAY_AUTH_TOKEN"):
        return os.environ["RAY_AUTH_TOKEN"].strip()
    path = Path(os.environ.get("RAY_AUTH_TOKEN_PATH") or Path.home() / ".ray" / "auth_token")
    try:
        return path.read_text().strip() or None
    except OSError:
        return None


def start_session(cpus: int | None = None, gpus: int | None = None, idle_s: float = DEFAULT_IDLE_S,
                  timeout: float = 180.0) -> RaySession:
    """Start a session host in the background and wait until its Ray is up; ExecutorError if one runs
    already or the host failed (with the end of its log)."""
    if not idle_s > 0:
        raise ConfigValidationError(f"idle_s must be positive, got {idle_s!r}")
    for name, value in (("cpus", cpus), ("gpus", gpus)):
        if value is not None and value < 0:
            raise ConfigValidationError(f"{name} must be a non-negative integer, got {value!r}")
    running = find_session()
    if running is not None:
        raise ExecutorError(f"a shared Ray session runs already at {running.address} (host pid {running.pid}); "
                            "`raytile ray stop` stops it")
    path = session_path()
    logfile = path.with_suffix(".log")
    cmd = [sys.executable, "-m", "raytile.actors.ray_session", "--idle-s", str(idle_s)]
    cmd += ["--cpus", str(cpus)] if cpus is not None else []
    cmd += ["--gpus", str(gpus)] if gpus is not None else []
    with open(logfile, "w") as out:
        os.chmod(logfile, 0o600)
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)  # not ended by the terminal's Ctrl-C
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        session = read_session(path)
        if session is not None and session.pid == proc.pid:
            return session
        if proc.poll() is not None:
            raise ExecutorError(f"the Ray session host ended ({proc.returncode}) before its Ray was up: "
                                f"{_tail(logfile)}")
        time.sleep(0.1)
    proc.terminate()
    proc.wait(30)
    raise ExecutorError(f"the Ray session host did not start its Ray within {timeout:.0f} s: {_tail(logfile)}")


def stop_session(timeout: float = 60.0) -> RaySession | None:
    """Stop the running session (SIGTERM to its host, which shuts its Ray down); the session it stopped,
    or None if none ran (a stale file is removed)."""
    path = session_path()
    session = read_session(path)
    if session is None:
        return None
    if not _alive(session.pid):
        _remove(path, session.pid)
        return None
    os.kill(session.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while _alive(session.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if _alive(session.pid):  # its Ray did not stop in time: end the host's whole process group
        os.killpg(session.pid, signal.SIGKILL)
    _remove(path, session.pid)
    return session


def _remove(path: Path, pid: int) -> None:
    """Remove the session file if it still names host ``pid`` (a newer session keeps its own)."""
    session = read_session(path)
    if session is not None and session.pid == pid:
        try:
            path.unlink()
        except FileNotFoundError:
            pass


def _tail(logfile: Path, lines: int = 5) -> str:
    try:
        text = logfile.read_text().strip().splitlines()
    except OSError:
        return "(no log)"
    return " | ".join(text[-lines:]) or "(empty log)"


def _write_session(path: Path, session: RaySession) -> None:
    """Write the file readable by its owner alone, atomically (a reader sees all of it or none)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(dataclasses.asdict(session), f)
    os.replace(tmp, path)


def _other_drivers(own_job: str) -> int:
    """Drivers other than the host connected to its Ray now (alive jobs in the GCS's job table)."""
    from ray._private import state

    return sum(1 for job in state.state.job_table() if not job.get("IsDead") and job.get("JobID") != own_job)


def _host(cpus: int | None, gpus: int | None, idle_s: float) -> int:
    """The session host: start a private Ray, write the session file, wait for SIGTERM or ``idle_s``
    without another driver, then shut the Ray down and remove the file."""
    import ray

    from raytile.actors.ray_start import COMMAND_INIT_KWARGS, start_ray

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    info = start_ray("local", cpus=cpus, gpus=gpus, need_workers=False, init_kwargs=dict(COMMAND_INIT_KWARGS))
    path = session_path()
    try:
        if info.address is None:
            raise ExecutorError("the session's Ray has no GCS address")
        own_job = ray.get_runtime_context().get_job_id()
        _write_session(path, RaySession(info.address, os.getpid(), idle_s, time.time(), cpus, gpus, _ray_token()))
        print(f"raytile ray session: Ray at {info.address}, idle limit {idle_s:g} s", flush=True)
        last_busy = time.monotonic()
        while not stop.wait(IDLE_POLL_S):
            try:
                if _other_drivers(own_job):
                    last_busy = time.monotonic()
            except Exception as e:  # noqa: BLE001  (the GCS busy for a moment: not idle)
                log.debug("job table unavailable: %s", e)
                last_busy = time.monotonic()
            if time.monotonic() - last_busy > idle_s:
                print(f"raytile ray session: idle for {idle_s:g} s, stopping", flush=True)
                break
    finally:
        _remove(path, os.getpid())
        ray.shutdown()
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m raytile.actors.ray_session",
                                description="the host of a shared Ray session (started by `raytile ray start`)")
    p.add_argument("--cpus", type=int, default=None)
    p.add_argument("--gpus", type=int, default=None)
    p.add_argument("--idle-s", type=float, default=DEFAULT_IDLE_S)
    args = p.parse_args(argv)
    return _host(args.cpus, args.gpus, args.idle_s)


if __name__ == "__main__":
    sys.exit(main())
