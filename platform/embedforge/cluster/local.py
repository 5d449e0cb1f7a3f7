"""A local Ray head for development, sized for the machine, with the dashboard on 127.0.0.1:8265.

Stages call `connect()`: inside `ray job submit` (RAY_ADDRESS set) or next to this project's running head (its
GCS port answers) they join it; otherwise they start a private in-process cluster, so the same code runs in tests,
scripts and jobs. EMBEDFORGE_DASHBOARD_PORT moves the dashboard when 8265 is taken.

The head keeps its files in its own temp dir and listens on its own GCS port, so `down()` stops exactly its
processes: other Ray clusters on the same machine (tests, other users) are left alone, unlike `ray stop`.
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import psutil

log = logging.getLogger(__name__)
DASHBOARD_HOST = "127.0.0.1"
DASHBOARD_PORT = int(os.environ.get("EMBEDFORGE_DASHBOARD_PORT", "8265"))
DASHBOARD_URL = f"http://{DASHBOARD_HOST}:{DASHBOARD_PORT}"
HEAD_PORT = 6390  # not Ray's default 6379, so a head started by someone else is never mistaken for ours
HEAD_ADDRESS = f"{DASHBOARD_HOST}:{HEAD_PORT}"
AUTH_MODE = "token"
_joined: list[str] = []  # how `connect` joined a cluster in this process: "address", "head" or "private"


def head_temp_dir() -> Path:
    """Where the head keeps its sessions and sockets ($EMBEDFORGE_RAY_TMP, default /tmp/embedforge-ray-<uid>)."""
    env = os.environ.get("EMBEDFORGE_RAY_TMP")
    return Path(env) if env else Path(tempfile.gettempdir()) / f"embedforge-ray-{os.getuid()}"


def _ray_bin() -> str:
    candidate = Path(sys.executable).with_name("ray")
    return str(candidate) if candidate.exists() else (shutil.which("ray") or "ray")


def _head_env() -> dict[str, str]:
    """This interpreter's bin folder first on PATH: job drivers started by the head run this venv's python.

    Token authentication is on explicitly (Ray 2.60 turns it on for the head, but its CLI clients only send the
    token from ~/.ray/auth_token when RAY_AUTH_MODE=token: `make` and `cluster/local/*.sh` export it)."""
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    return {
        **os.environ,
        "PATH": path,
        "RAY_USAGE_STATS_ENABLED": "0",
        "RAY_AUTH_MODE": AUTH_MODE,
        **local_worker_env(DASHBOARD_URL),
    }


def local_worker_env(dashboard_url: str) -> dict[str, str]:
    """What every Ray process of a one-machine cluster gets in its environment.

    - Where the cluster's state API is. Ray Train's placement-group monitor (a detached actor) asks the state API
      whether the training controller is alive. Without an address it auto-detects a cluster from Ray's default
      temp dir (`/tmp/ray`), which names the last cluster `ray start` made there: not this project's head (it keeps
      its own temp dir) and not a cluster started in-process, so with two Ray clusters on one machine (or one stale
      file) the monitor waits on a dead GCS, prints "Timed out while waiting for GCS to become available" with a
      traceback, and stops watching.
    - Ray Train's preemption watcher off. It polls for nodes being drained (spot instances reclaimed), which never
      happens to the only node of a one-machine cluster, and starting it logs a core_worker error ("has
      constructor arguments in the object store and max_restarts > 0") on every training run. Multi-node clusters
      (cluster/kuberay, cluster/launcher) keep it."""
    return {"RAY_API_SERVER_ADDRESS": dashboard_url, "RAY_TRAIN_ENABLE_PREEMPTION_WATCHER": "0"}


def ensure_auth_token() -> None:
    """Make the token (~/.ray/auth_token) that token authentication needs, when there is none yet.

    `ray.init` makes one for a cluster it starts, but `ray start --head` does not: on a fresh machine it fails
    with "Token authentication is enabled but no authentication token was found". Ray's own CLI makes it here
    (`ray get-auth-token --generate`); the token is never printed to the log."""
    result = subprocess.run(
        [_ray_bin(), "get-auth-token", "--generate"], env=_head_env(), capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise RuntimeError(f"could not create Ray's authentication token: {result.stderr.strip()}")


def default_object_store_bytes() -> int:
    """A quarter of RAM, at most 8 GiB and at most a third of the memory free now (at least 256 MiB): leaves room
    for model-holding actors on a 24 GiB machine, and lets the head start on a machine that is already busy."""
    memory = psutil.virtual_memory()
    return int(max(min(memory.total * 0.25, 8 * 1024**3, memory.available / 3), 256 * 1024**2))


def dashboard_alive(timeout: float = 2.0) -> bool:
    """True when the dashboard answers; 401/403 count too (Ray's token auth, which its own clients handle)."""
    try:
        with urllib.request.urlopen(f"{DASHBOARD_URL}/api/version", timeout=timeout) as resp:
            return resp.status == 200
    except urllib.error.HTTPError as err:
        return err.code in (401, 403)
    except OSError:
        return False


def _listening(port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((DASHBOARD_HOST, port), timeout=timeout):
            return True
    except OSError:
        return False


def head_running() -> bool:
    """True when this project's head is up (its GCS port answers), whoever else uses Ray on the machine."""
    return _listening(HEAD_PORT)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind((DASHBOARD_HOST, 0))
        return sock.getsockname()[1]


def port_owner(port: int) -> str:
    """'pid N: command' of the process listening on `port` on any interface, or "" when none is."""
    for conn in psutil.net_connections(kind="tcp"):
        if conn.laddr and conn.laddr.port == port and conn.status == psutil.CONN_LISTEN:
            try:
                return f"pid {conn.pid}: {' '.join(psutil.Process(conn.pid).cmdline())[:200]}"
            except (psutil.Error, ValueError):
                return f"pid {conn.pid}"
    return ""


def _wait(ready, what: str, wait_s: float) -> None:
    started = time.time()
    while time.time() - started < wait_s:
        if ready():
            log.info("%s ready in %.0fs", what, time.time() - started)
            return
        time.sleep(1.0)
    raise TimeoutError(f"{what} not ready within {wait_s:.0f}s")


def up(num_cpus: int | None = None, wait_s: float = 120.0) -> str:
    """Start the local head (idempotent) and wait until it accepts jobs; returns the dashboard URL."""
    if head_running():
        _wait(dashboard_alive, f"Ray head (already running), dashboard at {DASHBOARD_URL}", wait_s)
        return DASHBOARD_URL
    owner = port_owner(DASHBOARD_PORT)
    if owner:
        raise RuntimeError(
            f"dashboard port {DASHBOARD_PORT} is taken ({owner}); stop it or choose another port "
            "with EMBEDFORGE_DASHBOARD_PORT"
        )
    agent_port = _free_port()  # Ray's fixed default (52365) clashes with any other Ray on the machine
    cmd = [
        _ray_bin(),
        "start",
        "--head",
        f"--port={HEAD_PORT}",
        f"--dashboard-agent-listen-port={agent_port}",
        f"--ray-client-server-port={_free_port()}",
        f"--node-ip-address={DASHBOARD_HOST}",
        f"--temp-dir={head_temp_dir()}",
        f"--num-cpus={num_cpus or os.cpu_count() or 1}",
        f"--object-store-memory={default_object_store_bytes()}",
        "--include-dashboard=true",
        f"--dashboard-host={DASHBOARD_HOST}",
        f"--dashboard-port={DASHBOARD_PORT}",
        "--disable-usage-stats",
    ]
    ensure_auth_token()
    log.info("starting Ray head: %s", " ".join(cmd))
    subprocess.run(cmd, check=True, env=_head_env(), stdout=subprocess.DEVNULL)
    # jobs are accepted once the head's dashboard agent serves HTTP, which can trail the dashboard
    _wait(lambda: dashboard_alive() and bool(port_owner(agent_port)), f"Ray head, dashboard at {DASHBOARD_URL}", wait_s)
    return DASHBOARD_URL


def _is_head_process(cmdline: list[str], temp_dir: str) -> bool:
    joined = " ".join(cmdline)
    return temp_dir in joined or (f"{DASHBOARD_HOST}:{HEAD_PORT}" in joined and "ray" in joined)


def head_processes() -> list[psutil.Process]:
    """The head's processes (those naming its temp dir or GCS address) and all their descendants."""
    temp_dir = str(head_temp_dir())
    roots = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if proc.pid != os.getpid() and _is_head_process(proc.info["cmdline"] or [], temp_dir):
                roots.append(proc)
        except psutil.Error:
            continue
    found = {p.pid: p for p in roots}
    for proc in roots:
        try:
            found.update({c.pid: c for c in proc.children(recursive=True)})
        except psutil.Error:
            continue
    found.pop(os.getpid(), None)
    return list(found.values())


def down(timeout_s: float = 15.0) -> int:
    """Stop the local head's processes only (never `ray stop`); returns how many were stopped."""
    procs = head_processes()
    for proc in procs:
        try:
            proc.terminate()
        except psutil.Error:
            continue
    _, alive = psutil.wait_procs(procs, timeout=timeout_s)
    for proc in alive:
        try:
            proc.kill()
        except psutil.Error:
            continue
    log.info("stopped %d Ray head processes (%d needed SIGKILL)", len(procs), len(alive))
    return len(procs)


def status() -> int:
    return subprocess.run([_ray_bin(), "status", f"--address={HEAD_ADDRESS}"], env=client_env(), check=False).returncode


def token_available() -> bool:
    """Whether this process can present a Ray token: `RAY_AUTH_TOKEN`, `RAY_AUTH_TOKEN_PATH` or ~/.ray/auth_token
    (the places Ray reads it from)."""
    if os.environ.get("RAY_AUTH_TOKEN"):
        return True
    path = os.environ.get("RAY_AUTH_TOKEN_PATH")
    return Path(path).is_file() if path else (Path.home() / ".ray" / "auth_token").is_file()


def use_token_auth() -> None:
    """Present this user's Ray token when joining a head and no `RAY_AUTH_MODE` is set.

    Ray's clients send the token (~/.ray/auth_token) only in token mode, which a plain shell does not set (`make`
    exports it): without it a token-auth head refuses the connection ("Authentication token is missing or
    incorrect", then "Failed to connect to Ray cluster"). Ray reads its RAY_* settings once, when it loads, so they
    are read again here, as Ray's own setup does. A head without token authentication ignores the token."""
    if "RAY_AUTH_MODE" not in os.environ and token_available():
        os.environ["RAY_AUTH_MODE"] = AUTH_MODE
        from ray._raylet import Config

        Config.initialize("")


def client_env() -> dict[str, str]:
    """The environment for Ray's CLI (`ray status`, `ray job submit|status|logs`) run by a command: the token mode
    set when this user has a token and no mode is set (`use_token_auth`)."""
    env = dict(os.environ)
    if "RAY_AUTH_MODE" not in env and token_available():
        env["RAY_AUTH_MODE"] = AUTH_MODE
    return env


def connect(num_cpus: int | None = None) -> None:
    """Join the job's or the local head's cluster when there is one, else start a private local one."""
    import ray

    if ray.is_initialized():
        return
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if os.environ.get("RAY_ADDRESS"):
        use_token_auth()
        ray.init(address=os.environ["RAY_ADDRESS"], log_to_driver=True)
        _joined[:] = ["address"]
    elif head_running():
        use_token_auth()
        ray.init(address=HEAD_ADDRESS, log_to_driver=True)
        _joined[:] = ["head"]
    else:
        context = start_private_cluster(num_cpus or os.cpu_count() or 1, default_object_store_bytes())
        log.info("started a private Ray cluster for this command; dashboard: http://%s", context.dashboard_url)
        _joined[:] = ["private"]


def fixed_size_cluster() -> bool:
    """Whether `connect` joined a cluster that cannot grow: this project's local head or a private one (a cluster
    named by RAY_ADDRESS may have an autoscaler; a cluster this process did not join through `connect` is unknown)."""
    return _joined in (["head"], ["private"])


def start_private_cluster(num_cpus: int, object_store_memory: int, **init_kwargs: Any) -> Any:
    """Start a Ray cluster inside this process, never joining another, with its dashboard on a free port.

    The dashboard shows the stage's progress and serves the state API that Ray Train's placement-group monitor
    reads; every worker of this job gets its address (`local_worker_env`), so the monitor watches this cluster
    whatever else runs on the machine."""
    import ray

    port = _free_port()
    return ray.init(
        address="local",
        num_cpus=num_cpus,
        object_store_memory=object_store_memory,
        include_dashboard=True,
        dashboard_host=DASHBOARD_HOST,
        dashboard_port=port,
        runtime_env={"env_vars": local_worker_env(f"http://{DASHBOARD_HOST}:{port}")},
        **init_kwargs,
    )
