"""Under load against the live deployment: Prometheus metrics, autoscaling up and back down, no 5xx, backpressure
that answers 503 instead of hanging, and replica deaths: a request in flight on a dying model replica is sent again
to another one, so the client sees no error while a replica remains; with none left it gets a 503 with Retry-After,
never a 500."""

from __future__ import annotations

import os
import re
import signal
import threading
import time
import urllib.request
from collections import Counter

import httpx

TEXTS = [f"load test sentence number {i} about distributed embedding services" for i in range(16)]


def replicas(app: str, states: tuple[str, ...] = ("STARTING", "UPDATING", "RECOVERING", "RUNNING")) -> int:
    """Replicas of the app's deployment in the given states (default: every state of a live replica)."""
    from ray import serve

    status = serve.status().applications[app].deployments[app]
    counts = {str(getattr(k, "value", k)): v for k, v in status.replica_states.items()}
    return int(sum(counts.get(state, 0) for state in states))


def wait_for(predicate, timeout_s: float, what: str) -> float:
    start = time.monotonic()
    while time.monotonic() - start < timeout_s:
        if predicate():
            return time.monotonic() - start
        time.sleep(0.5)
    raise AssertionError(f"{what} did not happen within {timeout_s:.0f}s")


def hammer(
    url: str, key: str, model: str, stop: threading.Event, clients: int, texts: list[str], max_s: float
) -> Counter:
    """Closed-loop load from `clients` threads on 127.0.0.1 until `stop` is set or `max_s` passes."""
    statuses: Counter = Counter()
    lock = threading.Lock()
    deadline = time.monotonic() + max_s

    def client() -> None:
        with httpx.Client(timeout=60, headers={"Authorization": f"Bearer {key}"}) as http:
            while not stop.is_set() and time.monotonic() < deadline:
                try:
                    code = http.post(f"{url}/v1/embeddings", json={"model": model, "input": texts}).status_code
                except httpx.HTTPError as err:
                    code = type(err).__name__
                with lock:
                    statuses[code] += 1

    threads = [threading.Thread(target=client, daemon=True) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return statuses


def ok_series(text: str) -> dict[str, float]:
    """Every exported `requests_total{status="200"}` series (one per replica, earlier modules' included)."""
    pattern = r'ray_embedforge_requests_total\{([^}]*status="200"[^}]*)\} ([0-9.e+]+)'
    return {labels: float(value) for labels, value in re.findall(pattern, text)}


def test_metrics_are_exported(served, ray_cluster):
    port = ray_cluster.nodes()[0]["MetricsExportPort"]

    def scrape() -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
            return resp.read().decode()

    before = ok_series(scrape())
    with httpx.Client(headers={"Authorization": f"Bearer {served.key}"}, timeout=30) as http:
        for _ in range(3):
            assert (
                http.post(
                    f"{served.url}/v1/embeddings", json={"model": served.model_name, "input": TEXTS[:4]}
                ).status_code
                == 200
            )
    wanted = [
        "ray_embedforge_requests_total",
        "ray_embedforge_tokens_total",
        "ray_embedforge_batch_size_bucket",
        "ray_embedforge_batch_tokens_bucket",
        "ray_embedforge_request_latency_ms_bucket",
    ]
    text = ""

    def new_ok() -> float:
        """200s counted since `before`; a series that vanished (a deleted replica) does not count against it."""
        return sum(max(0.0, value - before.get(labels, 0.0)) for labels, value in ok_series(text).items())

    def exported() -> bool:  # metrics are exported periodically: wait until all three requests are counted
        nonlocal text
        text = scrape()
        return all(name in text for name in wanted) and new_ok() >= 3

    wait_for(exported, 60, "embedforge metrics export of the three requests")
    assert new_ok() == 3


def test_autoscales_up_under_load_and_back_down(served):
    app = served.app_name
    wait_for(lambda: replicas(app) == 1, 60, "a single replica before the load")
    stop = threading.Event()
    result: dict = {}
    loader = threading.Thread(
        target=lambda: result.update(
            statuses=hammer(served.url, served.key, served.model_name, stop, clients=12, texts=TEXTS, max_s=90)
        )
    )
    loader.start()
    try:
        wait_for(lambda: replicas(app) >= 2, 60, "scale-up above 1 replica")
        time.sleep(5)  # the load goes on while the new replica starts
    finally:
        stop.set()
        loader.join()
    statuses = result["statuses"]
    assert statuses[200] >= 5, statuses
    assert set(statuses) == {200}, f"non-200 answers under load: {statuses}"
    wait_for(lambda: replicas(app) == 1, 60, "scale-down back to 1 replica")


def test_overload_answers_503_and_never_hangs(overload_served):
    """max_ongoing_requests=1 and max_queued_requests=1: most of 16 concurrent clients are turned away at once."""
    stop = threading.Event()
    start = time.monotonic()
    statuses = hammer(
        overload_served.url, overload_served.key, overload_served.model_name, stop, clients=16, texts=TEXTS * 2, max_s=8
    )
    elapsed = time.monotonic() - start
    assert elapsed < 40, f"clients were kept waiting: {elapsed:.0f}s"
    assert statuses[200] > 0 and statuses[503] > 0, statuses
    assert set(statuses) <= {200, 503}, statuses


def replica_pids(app: str) -> list[int]:
    """Processes of the app's live model replicas: Ray titles an actor's worker `ray::<actor class>`, followed by
    `.<method>` while one runs (the gateway's title only starts like the model's)."""
    import psutil

    title = f"ray::ServeReplica:{app}:{app}"
    pids = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        cmdline = proc.info["cmdline"] or []
        name = cmdline[0] if cmdline else ""
        if (name == title or name.startswith(title + ".")) and proc.info["status"] != psutil.STATUS_ZOMBIE:
            pids.append(proc.pid)
    return pids


def load_while(served, action, clients: int = 8, seconds: float = 20.0):
    """Closed-loop load from `clients` threads; `action()` runs once the load is on; statuses when it ends."""
    stop, result = threading.Event(), {}
    loader = threading.Thread(
        target=lambda: result.update(
            statuses=hammer(served.url, served.key, served.model_name, stop, clients, TEXTS, seconds + 60)
        )
    )
    loader.start()
    try:
        time.sleep(2)
        action()
        time.sleep(seconds)
    finally:
        stop.set()
        loader.join()
    return result["statuses"]


def test_killing_one_of_two_replicas_under_load_loses_no_request(two_replicas):
    app = two_replicas.app_name
    wait_for(lambda: len(replica_pids(app)) == 2, 180, "two live replicas")
    victim = replica_pids(app)[0]
    statuses = load_while(two_replicas, lambda: os.kill(victim, signal.SIGKILL))
    assert statuses[200] > 20, statuses
    assert set(statuses) == {200}, f"clients saw errors while a replica remained: {statuses}"
    assert victim not in replica_pids(app)
    wait_for(lambda: replicas(app, ("RUNNING",)) == 2, 180, "the replica replaced")


def test_with_no_replica_left_clients_get_503_with_retry_after_never_500(two_replicas):
    app = two_replicas.app_name
    wait_for(lambda: len(replica_pids(app)) == 2, 180, "two live replicas")
    headers = {"Authorization": f"Bearer {two_replicas.key}"}
    answers: list[httpx.Response] = []

    def kill_all() -> None:
        for pid in replica_pids(app):
            os.kill(pid, signal.SIGKILL)
        with httpx.Client(timeout=60, headers=headers) as http:
            for _ in range(6):
                answers.append(
                    http.post(
                        f"{two_replicas.url}/v1/embeddings", json={"model": two_replicas.model_name, "input": TEXTS[:2]}
                    )
                )

    statuses = load_while(two_replicas, kill_all, clients=4, seconds=5)
    assert set(statuses) <= {200, 503}, statuses
    for resp in answers:
        assert resp.status_code in (200, 503), resp.text
        if resp.status_code == 503:
            assert int(resp.headers["Retry-After"]) > 0 and "retry later" in resp.json()["error"]["message"]
    wait_for(lambda: replicas(app, ("RUNNING",)) == 2, 180, "replicas back after the loss")
    ok = httpx.post(
        f"{two_replicas.url}/v1/embeddings", json={"model": two_replicas.model_name, "input": "back"}, headers=headers
    )
    assert ok.status_code == 200


def test_a_deploy_killed_half_way_is_recovered_by_the_next(ray_cluster, minilm_dir, interrupted_deploy):
    """SIGKILL the process deploying an app once Serve has it, before it is ready: the next deploy of the same
    config finishes and serves."""
    import json
    import subprocess
    import sys

    from ray import serve

    from embedforge.serve.deploy import deploy

    config, key = interrupted_deploy
    code = (
        "import json, sys; from embedforge.config.serve import ServeConfig; from embedforge.serve.deploy import deploy;"
        " deploy(ServeConfig.model_validate(json.loads(sys.argv[1])), 'bundled:all-minilm-l6-v2', port=0)"
    )
    env = {**os.environ, "RAY_ADDRESS": ray_cluster.get_runtime_context().gcs_address}
    proc = subprocess.Popen(
        [sys.executable, "-c", code, json.dumps(config.model_dump(mode="json"))], env=env, start_new_session=True
    )
    try:
        wait_for(lambda: config.name in serve.status().applications, 180, "the app registered by the first deploy")
        assert proc.poll() is None, "the first deploy ended before it could be interrupted"
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        url = deploy(config, "bundled:all-minilm-l6-v2", port=0, wait_ready_s=180)
        headers = {"Authorization": f"Bearer {key}"}
        resp = httpx.post(f"{url}/v1/embeddings", json={"model": config.model_name, "input": "ok"}, headers=headers)
        assert resp.status_code == 200 and len(resp.json()["data"][0]["embedding"]) == 384
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        serve.delete(config.name)
