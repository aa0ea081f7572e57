"""One way to start or join Ray: :func:`start_ray`, used by the Context, the CLI, Serve and pipelines.

Where Ray comes from is decided here, and nowhere else:

- ``address="local"``: a private Ray instance of this process, started beside
  any other Ray on the machine and never joining one. The ``raytile`` commands
  use it when no ``--address`` is given.
- ``address=None``: Ray's own convention, as ``ray.init()`` (what
  ``rt.Context()`` does): join the cluster named by ``RAY_ADDRESS`` or started
  with ``ray start`` on this machine, else start a local instance. Joining is
  said in one log line naming the cluster and its resources, so that nobody
  runs on a shared cluster without knowing.
- ``"auto"``, ``"host:6379"``, ``"ray://host:10001"``: join that cluster.

If this process is connected to Ray already, that connection is used as it
is. Unless told a cluster need not host workers, a cluster without the CPUs
(or GPUs) a worker needs is an :class:`~raytile.common.errors.ExecutorError`
at once, naming what is missing, instead of a wait for workers that never
start.

>>> info = start_ray("local", cpus=2)        # doctest: +SKIP
>>> info.started, info.address               # doctest: +SKIP
(True, '127.0.0.1:61234')
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import logging
import signal
import threading
from typing import Any, Iterator, Mapping

import ray

from raytile.common.errors import ExecutorError

__all__ = ["RayStart", "start_ray", "quiet_start", "COMMAND_INIT_KWARGS", "describe_resources", "check_can_host_workers"]

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class RayStart:
    """What :func:`start_ray` did: ``started`` a Ray of this process's own (then it is this process's to
    shut down), or joined the cluster at ``address``; ``resources`` are the cluster's total resources."""

    started: bool
    joined_existing: bool
    address: str | None
    resources: dict[str, float]


def start_ray(address: str | None = None, *, cpus: int | None = None, gpus: int | None = None,
              need_workers: bool = True, autoscaling: bool = False,
              init_kwargs: Mapping[str, Any] | None = None) -> RayStart:
    """Join or start Ray as the module doc says, then check the cluster can host workers.

    ``cpus``/``gpus``: the workers the caller will start (a private instance gets that many CPUs and
    GPUs; None: one per CPU and GPU of the cluster). ``need_workers=False`` skips the check (listing
    runs, printing the cluster's resources). ``autoscaling=True`` (the caller asked the autoscaler
    for workers) skips it too: nodes may still come. ``init_kwargs`` go to ``ray.init``.
    """
    connected_here = not ray.is_initialized()
    if connected_here:
        info = _init(address, cpus, gpus, dict(init_kwargs or {}))
    else:
        info = RayStart(False, True, _gcs_address(), _resources())
    if need_workers and not autoscaling:
        try:
            check_can_host_workers(info.resources, cpus, gpus, info.address)
        except ExecutorError:
            if connected_here:  # leave this process as it was: no Ray
                ray.shutdown()
            raise
    return info


def _init(address: str | None, cpus: int | None, gpus: int | None, kwargs: dict[str, Any]) -> RayStart:
    if address is None or address == "local":
        kwargs.setdefault("include_dashboard", False)
        if cpus is not None:  # a new instance is sized as asked (joining one with a size is refused)
            kwargs.setdefault("num_cpus", cpus)
        if gpus is not None:
            kwargs.setdefault("num_gpus", gpus)
    if address is not None:
        kwargs["address"] = address
    if address is not None and address.startswith("ray://"):
        _enable_token_auth_for_client()
    try:
        _init_ray(kwargs, new_instance_config=address is None or address == "local")
    except ModuleNotFoundError as e:
        raise ExecutorError(
            f"connecting to {address!r} needs Ray Client, which plain ray lacks ({e}); "
            'install it with pip install "raytile[client]"'
        ) from None
    except ValueError as e:
        raise ExecutorError(
            f"cannot start Ray with cpus={cpus}, gpus={gpus}: a Ray cluster is already running on this machine "
            f"({e}). Use rt.Context.make_local(...) for a private instance beside it, or "
            "rt.Context.connect('auto') to join it"
        ) from None
    except ConnectionError as e:
        raise ExecutorError(
            f"cannot connect to the Ray cluster at {address!r}: {e}. If the cluster uses Ray's token "
            "authentication, set RAY_AUTH_MODE=token and RAY_AUTH_TOKEN (or RAY_AUTH_TOKEN_PATH) to the "
            "token `ray get-auth-token` prints on the head node"
        ) from None
    started = _started_here()
    if started:
        _shut_down_quickly_at_exit()
    info = RayStart(started, not started, _gcs_address(), _resources())
    if address is None and not started:
        # Ray's convention found a cluster (RAY_ADDRESS or `ray start`): say so, in one line
        log.warning("joined the running Ray cluster at %s (found through RAY_ADDRESS or `ray start`): %s; "
                    "for a private local Ray use rt.Context.make_local()", info.address,
                    describe_resources(info.resources))
    return info


#: Ray settings for an instance raytile starts (joining a cluster keeps the cluster's own). A task's
#: reply up to this size goes back inside the reply instead of through the object store: a partition's
#: result buffers (a 256x256 float32 frame is 256 KiB) then cost one message, not an object put, fetch
#: and free (measured on 2 CPUs: 0.6 ms against 1.1 ms a pipelined call; bench_stream 16 MiB
#: partitions 148-155 ms against 170-190 ms).
#:
#: ``get_check_signal_interval_milliseconds``: how often a waiting ``ray.get`` looks for a signal. Ray's
#: 1 s made Ctrl-C of a script whose runs are coordinated by the coordinator actor (the driver waits
#: in ``ray.get``) take a second to raise KeyboardInterrupt (issue 37); 100 ms costs ten wake-ups a
#: second of a waiting driver.
#:
#: ``task_events_max_num_task_in_gcs``: the tasks whose events (state changes, for the dashboard and
#: ``ray list tasks``) the GCS keeps. Each costs it about 3.7 KB, and Ray's 100,000 let a service that
#: runs for days grow its GCS by 370 MB (issue 37: 338 -> 370 MiB in 10 minutes of ``raytile serve``).
#: raytile's own calls made per partition, per tile report or per result poll
#: (``WorkerActor.run_task``, ``ProgressActor.add``, ``CoordinatorActor.next``, ...) keep no task
#: events at all (``@ray.method(enable_task_events=False)``), on any cluster; this bounds what the
#: others keep (Serve's own tasks, ~2.3 a served run: a 10,000 cap was reached after ~4,000 runs, the
#: GCS growing by 37 MB until then) at about 4 MB, reached within minutes.
NEW_INSTANCE_CONFIG = {"max_direct_call_object_size": 1024 * 1024, "get_check_signal_interval_milliseconds": 100,
                       "task_events_max_num_task_in_gcs": 1_000}


def _init_ray(kwargs: dict[str, Any], new_instance_config: bool) -> None:
    """``ray.init(**kwargs)``, with :data:`NEW_INSTANCE_CONFIG` when it may start an instance, quietly
    (:func:`quiet_start`).

    With ``address=None`` Ray joins a cluster it finds (``RAY_ADDRESS``, ``ray start``) and refuses a
    system config there: then it is called again without one. A Ray that does not come up (its node
    timing out on a busy machine) is an :class:`ExecutorError` saying so, not Ray's traceback."""
    with quiet_start():
        try:
            if not new_instance_config or "_system_config" in kwargs:
                ray.init(**kwargs)
                return
            try:
                ray.init(**kwargs, _system_config=dict(NEW_INSTANCE_CONFIG))
            except ValueError as e:
                if "_system_config" not in str(e):
                    raise
                ray.init(**kwargs)
        except (ValueError, ConnectionError, ModuleNotFoundError, ExecutorError):
            raise
        except Exception as e:
            if "timed out during startup" not in str(e):
                raise
            raise ExecutorError(f"Ray did not start: {e} (Ray's logs: /tmp/ray/session_latest/logs)") from None


class _TokenNotice(logging.Filter):
    """Drops Ray's notice that it turned token authentication on for a cluster it starts (Ray >= 2.52
    prints it on every ``ray.init`` that starts one): the token is made and used as Ray does, the
    notice is Ray's own log line, not something the user asked for. Other records pass."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Token authentication is enabled for this Ray cluster")


#: ``ray.init`` settings of the ``raytile`` commands: what the user asked for stays on the screen, Ray's own
#: logs stay in Ray's log files (``/tmp/ray/session_latest/logs``): no worker output echoed to the
#: terminal (the commands run built-in UDFs, whose errors come back as exceptions), and the driver's
#: ``ray`` logger at WARNING (no "Started a local Ray instance" INFO lines).
COMMAND_INIT_KWARGS: dict[str, Any] = {"log_to_driver": False, "logging_level": logging.WARNING}

#: The logger of Ray's token authentication set-up.
TOKEN_LOGGER = "ray._private.authentication.authentication_token_setup"


@contextlib.contextmanager
def quiet_start() -> Iterator[None]:
    """Around ``ray.init``: without Ray's token notice (:class:`_TokenNotice`), and afterwards without the
    stack dump Ray's C++ failure handler prints when this process gets SIGTERM.

    ``ray.init`` installs absl's failure signal handler in the driver for SIGTERM too: a notebook kernel
    (or any script) that used Ray and is then stopped with SIGTERM printed ``*** SIGTERM received ...
    @ ... epoll_wait`` and a stack trace before it ended. What Python had for SIGTERM before
    (the default: end the process; or the user's handler) is installed again, so SIGTERM ends the
    process as it would without Ray; crashes (SIGSEGV, SIGABRT) keep Ray's stack traces. Processes
    Ray started with this one end with it (Ray ties them to their parent)."""
    main = threading.current_thread() is threading.main_thread()
    before = signal.getsignal(signal.SIGTERM) if main else None
    try:
        with without_token_notice():
            yield
    finally:
        if main and before is not None:
            signal.signal(signal.SIGTERM, before)


@contextlib.contextmanager
def without_token_notice() -> Iterator[None]:
    """Ray's token notice (:class:`_TokenNotice`) dropped while the block runs: around ``ray.init`` of a
    Ray that raytile starts, and where a command takes up the token of raytile's shared session."""
    notice = _TokenNotice()
    token_log = logging.getLogger(TOKEN_LOGGER)
    token_log.addFilter(notice)
    try:
        yield
    finally:
        token_log.removeFilter(notice)


def _shut_down_quickly_at_exit() -> None:
    """At interpreter exit, shut the Ray this process started down in under half a second instead of
    about two (what made Ctrl-C of a script take 2.5 s to end it, issue 37).

    Ray's own exit hook sleeps 0.5 s first (to let error messages print), then stops its processes one
    by one, each given a second to end on SIGTERM: the autoscaler monitor, stopped after the GCS, spends
    that second trying to report its end to the GCS that is gone, and is killed then. A private local
    instance has nothing to autoscale: the monitor is killed first, at once, and Ray is shut down
    without the sleep. Registered after ``ray.init``, so it runs before Ray's hooks (which then find
    nothing left to do); it does nothing if Ray was shut down, or started again, since.

    A second Ctrl-C while it runs (a user pressing it again because the script is ending) is ignored
    until Ray is down: it would stop the shutdown half way and print Python's "Exception ignored in
    atexit callback" traceback, and Ray's own hook would then do the slow stop after all."""
    worker = getattr(ray, "_private").worker
    started = getattr(worker, "_global_node", None)
    if started is None:
        return

    def shut_down() -> None:
        node = getattr(worker, "_global_node", None)
        if node is None or node is not started:
            return
        with _ctrl_c_ignored():
            try:
                node.kill_monitor(check_alive=False)
            except Exception:  # noqa: BLE001  (a Ray without that method: its own hook stops the monitor)
                pass
            ray.shutdown()

    atexit.register(shut_down)


@contextlib.contextmanager
def _ctrl_c_ignored() -> Iterator[None]:
    """SIGINT ignored while the block runs (in the main thread; elsewhere Python delivers no signal)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)


def _started_here() -> bool:
    """Whether ``ray.init`` in this process started the Ray instance (it is the head node's starter)."""
    node = getattr(getattr(ray, "_private").worker, "_global_node", None)
    return bool(node is not None and getattr(node, "head", False))


def _gcs_address() -> str | None:
    try:
        return str(ray.get_runtime_context().gcs_address)
    except Exception:  # noqa: BLE001  (Ray Client drivers have no GCS address of their own)
        return None


def _resources() -> dict[str, float]:
    try:
        return {k: float(v) for k, v in ray.cluster_resources().items()}
    except Exception:  # noqa: BLE001
        return {}


def describe_resources(resources: Mapping[str, float]) -> str:
    """``"1 node, 2 CPU, 0 GPU, 10.0 GiB memory"`` for a cluster's total resources."""
    nodes = sum(1 for k in resources if k.startswith("node:") and k != "node:__internal_head__")
    mem = resources.get("memory", 0.0) / 2**30
    return (f"{nodes} node{'s' if nodes != 1 else ''}, {resources.get('CPU', 0.0):g} CPU, "
            f"{resources.get('GPU', 0.0):g} GPU, {mem:.1f} GiB memory")


def check_can_host_workers(resources: Mapping[str, float], cpus: int | None, gpus: int | None,
                           address: str | None = None) -> None:
    """ExecutorError, naming what is missing, if a cluster with ``resources`` cannot host the workers
    asked for: ``cpus``/``gpus`` workers, or with both None at least one CPU or GPU worker."""
    have_cpu, have_gpu = resources.get("CPU", 0.0), resources.get("GPU", 0.0)
    where = f"the Ray cluster at {address}" if address else "the Ray cluster"
    missing = []
    if cpus is None and gpus is None:
        if have_cpu < 1 and have_gpu < 1:
            missing.append("a CPU or a GPU for one worker (it has 0 CPU and 0 GPU)")
    else:
        if cpus and have_cpu < 1:
            missing.append(f"a CPU for its {cpus} CPU worker(s) (it has {have_cpu:g} CPU)")
        if gpus and have_gpu < gpus:
            missing.append(f"{gpus} GPU(s) for its GPU workers (it has {have_gpu:g} GPU)")
    if missing:
        raise ExecutorError(
            f"{where} cannot host raytile's worker actors: it lacks {' and '.join(missing)} "
            f"({describe_resources(resources)}). Start a private local Ray instead "
            "(rt.Context.make_local(), or the raytile commands without --address), or add nodes with CPUs")


def _enable_token_auth_for_client() -> None:
    """Turn Ray's token authentication on in this process if a token is available, as a direct
    driver's ``ray.init`` does (Ray >= 2.52); Ray Client does not, and a cluster with token
    authentication then lets the connection time out (measured: 30 s, then "connection timeout")."""
    try:
        from ray._private.authentication.authentication_token_setup import (
            maybe_enable_token_auth_if_token_available,
        )
    except ImportError:  # a Ray without token authentication
        return
    maybe_enable_token_auth_if_token_available(warn_if_disabled=False)
