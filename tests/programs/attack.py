"""A hostile tenant's training program (tests/test_security.py): ``build`` tries each attack on
the server and on other tenants, prints one line per attempt to its log, then fails."""

import json
import os
import socket
import subprocess
import sys
import threading


def attempt(name, action):
    try:
        detail = action()
        print(f"ATTACK {name}: SUCCEEDED {str(detail)[:200]}", flush=True)
    except BaseException as e:  # noqa: BLE001 (a blocked attempt is any error)
        print(f"ATTACK {name}: blocked ({type(e).__name__}: {str(e)[:200]})", flush=True)


def read(path):
    with open(path, "rb") as f:
        return f.read(64)


def write(path):
    with open(path, "w") as f:
        f.write("owned")
    return path


def ray_call(address, actor):
    code = (
        f"import ray; ray.init(address={address!r}, namespace='dlsched', logging_level='ERROR'); "
        f"a = ray.get_actor({actor!r}, namespace='dlsched'); ray.kill(a); print('KILLED')"
    )
    # where Ray's port cannot even be reached, no client can get in (Ray's retries for ever)
    host, port = address.rsplit(":", 1)
    socket.create_connection((host, int(port)), 5).close()
    # a client Ray lets in connects in 2-5 s here; one without the token retries for ever, so 20 s
    # without a connection is blocked
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=20)
    if out.returncode or "KILLED" not in out.stdout:
        raise ConnectionError(
            out.stderr.strip().splitlines()[-1] if out.stderr.strip() else f"exit {out.returncode}"
        )
    return out.stdout


def ask_template():
    """Every abstract socket of a tenant template this network shows, asked for a process as
    root in pid 1's namespaces (runtime/template.py)."""
    names = [
        line.split()[-1][1:]
        for line in open("/proc/net/unix").read().splitlines()[1:]
        if line.split()[-1].startswith("@dlsched-template")
    ]
    if not names:
        raise FileNotFoundError("no template socket in this network namespace")
    answers = []
    for name in names:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(10)
            s.connect("\0" + name)
            request = json.dumps({"placeholder": 1, "uid": 0, "limits": {}, "cwd": "/", "env": {}})
            socket.send_fds(s, [request.encode()], [0, 1, 2])
            answers.append(s.recv(100))
    if not any(answers):
        raise PermissionError(f"closed unanswered by {len(names)} template(s)")
    return answers


def many_threads(n):
    stop = threading.Event()
    started = 0
    try:
        for _ in range(n):
            threading.Thread(target=stop.wait, daemon=True).start()
            started += 1
    finally:
        stop.set()
    return f"{started} threads"


def build(args):
    data, victim_dir = args["data_dir"], args["victim_dir"]
    print("IDENTITY " + json.dumps({"uid": os.getuid(), "env": sorted(os.environ)}), flush=True)
    attempt("read admin token", lambda: read(os.path.join(data, "admin.token")))
    attempt("read database", lambda: read(os.path.join(data, "db.sqlite")))
    attempt("read ray token", lambda: read(args["ray_token"]))
    attempt("list other job", lambda: os.listdir(victim_dir))
    attempt("read other checkpoint", lambda: read(os.path.join(victim_dir, "checkpoint.pt")))
    attempt("write data dir", lambda: write(os.path.join(data, "owned")))
    attempt("write other job", lambda: write(os.path.join(victim_dir, "owned")))
    attempt("write server tree", lambda: write(os.path.join(args["writable_by_server"], "owned")))
    attempt("signal other worker", lambda: os.kill(args["victim_pid"], 9))
    attempt("ray kill other actor", lambda: ray_call(args["ray_address"], args["victim_actor"]))
    host, port = args["ray_address"].rsplit(":", 1)
    attempt("reach ray's port", lambda: socket.create_connection((host, int(port)), 5).close())
    # Ray's autoscaler serves its metrics on 44217 with no token
    attempt("read ray's metrics", lambda: socket.create_connection((host, 44217), 5).close())
    attempt("ask a node's template for a root process", ask_template)
    attempt("start 1000 threads", lambda: many_threads(1000))
    attempt("allocate 12 GiB", lambda: len(bytearray(12 * 2**30)))
    attempt("write own job dir", lambda: write("/job/mine") and "expected")
    raise RuntimeError("attack program done")
