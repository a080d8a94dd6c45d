"""The launch scripts: ``--help`` and a clear failure without torchrun, two "nodes" on
127.0.0.1 joined by torchrun's c10d rendezvous (``launch/multinode.sh``), and the demo."""
import os
import random
import socket
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TORCHRUN = os.path.join(os.path.dirname(sys.executable), "torchrun")
TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


def _env(**extra):
    env = {k: v for k, v in os.environ.items() if k not in TORCHRUN_VARS}
    env.update(TORCH_DEVICE_BACKEND_AUTOLOAD="0", OMP_NUM_THREADS="1", **extra)
    return env


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("script", ["launch/run.py", "launch/demo.py"])
def test_help_and_clear_failure_without_torchrun(script):
    path = os.path.join(ROOT, script)
    helped = subprocess.run([sys.executable, path, "--help"], capture_output=True, text=True,
                            timeout=120, env=_env())
    assert helped.returncode == 0 and "--mode" in helped.stdout
    bare = subprocess.run([sys.executable, path], capture_output=True, text=True, timeout=120,
                          env=_env())
    assert bare.returncode == 2
    assert "must be launched with torchrun" in bare.stderr and "RANK" in bare.stderr


def test_multinode_script_usage():
    script = os.path.join(ROOT, "launch", "multinode.sh")
    helped = subprocess.run([script, "--help"], capture_output=True, text=True, timeout=30)
    assert helped.returncode == 0 and "--rdzv" not in helped.stdout and "HOST:PORT" in helped.stdout
    bare = subprocess.run([script, "not-an-endpoint"], capture_output=True, text=True, timeout=30)
    assert bare.returncode == 2 and "HOST:PORT" in bare.stderr


def _port_outside_ephemeral_range():
    """A free port below the kernel's ephemeral range: ``bind(0)`` and every outgoing
    connection (gloo, TCPStore clients of the tests running beside this one) draw their ports
    from that range, so a port taken there and released can be someone else's before torchrun
    binds it; then the agent that meant to host the rendezvous store joins a stranger's."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    rng = random.Random(os.getpid() ^ time.monotonic_ns())
    for _ in range(200):
        port = rng.randrange(max(1024, low - 12000), low)
        if 29000 <= port < 30000:  # torch's default ports (MASTER_PORT 29500, rendezvous 29400)
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    return _free_port()


# what torchrun prints when the rendezvous itself (not the program) failed: the endpoint was
# taken between choosing it and binding it. Such a run is started again once, on a new port.
# A node that joined a stranger's listener instead waits silently (torchrun's read and join
# timeouts do not end that wait): both logs are empty, and that too is retried once.
_RENDEZVOUS_FAILED = ("RendezvousConnectionError", "RendezvousTimeoutError",
                      "EADDRINUSE", "Address already in use")


def _rendezvous_failed(out):
    return (not any(o.strip() for o in out)
            or any(m in o for o in out for m in _RENDEZVOUS_FAILED))


def _two_nodes(tmp_path, attempt, limit_s):
    script = os.path.join(ROOT, "launch", "multinode.sh")
    env = _env(TORCHRUN=TORCHRUN, LOCAL_ADDR="127.0.0.1", RDZV_ID=f"test{os.getpid()}_{attempt}",
               NNODES="2", NPROC_PER_NODE="1", RDZV_CONF="join_timeout=120,read_timeout=60")
    endpoint = f"127.0.0.1:{_port_outside_ephemeral_range()}"
    args = [script, endpoint, "--model", "tp-transformer", "--steps", "3", "--timeout", "60"]
    logs = [open(tmp_path / f"node{i}.attempt{attempt}.log", "w+") for i in range(2)]
    nodes = [subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env,
                              start_new_session=True) for log in logs]
    deadline = time.monotonic() + limit_s
    codes = []
    for node in nodes:
        try:
            codes.append(node.wait(timeout=max(1.0, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            codes.append(f"hung (killed after {limit_s} s)")
    for node in nodes:
        if node.poll() is None:
            os.killpg(node.pid, 9)
            node.wait(10)
    out = []
    for log in logs:
        log.seek(0)
        out.append(log.read())
        log.close()
    return endpoint, codes, out


def test_two_nodes_c10d_rendezvous_on_localhost(tmp_path):
    """Two torchrun agents (1 process each) meet at one c10d rendezvous endpoint. Bounded: a
    hang is killed (180 s, then 240 s) and fails with both nodes' logs; a rendezvous that lost
    its port to another process is retried once on a new one (the logs of both tries shown)."""
    tries = []
    for attempt, limit_s in enumerate((180, 240)):
        endpoint, codes, out = _two_nodes(tmp_path, attempt, limit_s)
        tries.append((endpoint, codes, out))
        if codes == [0, 0] or not _rendezvous_failed(out):
            break
    report = "\n\n".join(f"--- try {i} at {ep}: node {n} exit {c} ---\n{o[-3000:]}"
                          for i, (ep, cs, os_) in enumerate(tries)
                          for n, (c, o) in enumerate(zip(cs, os_)))
    assert codes == [0, 0], report
    table = next(o for o in out if "torchair_dist run:" in o)  # rank 0 lives on one node
    assert "world size 2, cpu/gloo" in table
    rows = [line.split() for line in table.splitlines() if line.split()[:1] in (["0"], ["1"])]
    assert [r[0] for r in rows] == ["0", "1"] and all(float(r[-1]) <= 1e-5 for r in rows)


def test_demo_generates_under_torchrun():
    """The main job in its default mode (max-autotune): static-KV-cache decode of a HF Llama
    loaded with transformers' TP; both drivers' tokens equal eager's on every rank."""
    proc = subprocess.run(
        [TORCHRUN, "--nproc-per-node", "2", "--master-addr", "127.0.0.1", "--master-port",
         str(_free_port()), os.path.join(ROOT, "launch", "demo.py"), "--layers", "1",
         "--new-tokens", "4", "--repeat", "1"],
        capture_output=True, text=True, timeout=240, env=_env())
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    rows = [line.split() for line in proc.stdout.splitlines()
            if line.split()[:2] in (["0", "max-autotune"], ["1", "max-autotune"])]
    assert len(rows) == 2, proc.stdout
    for r in rows:  # rank mode model compile eager ours ratio tokens =eager gen= graphs recomp
        assert r[2] == "llama" and r[7] == "8" and r[8] == "True" and r[9] == "True", r
        assert r[10] == "1" and r[11] == "0" and r[12] == "n/a" and float(r[13]) <= 1e-4, r
