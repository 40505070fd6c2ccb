"""What the benchmark scripts share to run real processes: a free port, a wait for an HTTP
endpoint to answer, a stop that cannot leave a process behind, the rights calls of
`never_above` limits, and a warning when the machine's scheduling makes timings unfair.

Imported by the scripts next to it (`python3 scripts/NAME.py` puts this folder on the path).
"""

import os
import socket
import subprocess
import sys
import time
import urllib.request


def free_port():
    """A port nothing listens on now (the kernel's pick; free until someone binds it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url, proc, deadline_s=30):
    """Waits until `url` answers 200; fails early when `proc`, which serves it, has exited."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args[0]} exited with {proc.returncode} before {url} answered")
        try:
            with urllib.request.urlopen(url, timeout=1) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{url} not ready within {deadline_s} s")


def rights_calls(ports):
    """Rights of `never_above` limits taken or given back so far by the services at `ports`
    ((grpc, http) pairs): the sum of their `rls_origin_operations_total{op="rights"}`."""
    total = 0.0
    for _, http in ports:
        with urllib.request.urlopen(f"http://127.0.0.1:{http}/metrics", timeout=5) as answer:
            for line in answer.read().decode().splitlines():
                if line.startswith("rls_origin_operations_total{") and 'op="rights"' in line:
                    total += float(line.rsplit(" ", 1)[1])
    return total


def stop_all(procs, grace_s):
    """SIGTERM to every process at once, then SIGKILL to any still running after `grace_s`."""
    for proc in procs:
        proc.terminate()
    for proc in procs:
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()


def warn_if_autogrouped():
    """With the kernel's autogroup scheduling on, `nice` does not reach across sessions: a
    build started from another terminal takes the cores as an equal of the server measured, and
    its load shows as the server's latency or lost throughput."""
    try:
        with open("/proc/sys/kernel/sched_autogroup_enabled") as f:
            on = f.read().strip() == "1"
    except OSError:
        return
    if on and os.getloadavg()[0] > 1:
        print("warning: autogroup scheduling is on and the machine is busy: other sessions' "
              "processes compete with the service whatever their nice value "
              "(echo 0 > /proc/sys/kernel/sched_autogroup_enabled, or a quiet machine)",
              file=sys.stderr)
