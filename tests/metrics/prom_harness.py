"""What the real-Prometheus tests share: child processes that never outlive the test,
free ports, a Prometheus started on loopback, and its query API.

Standard library only.
"""

import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

children = []


def fail(message):
    print("FAIL: " + message, file=sys.stderr)
    sys.exit(1)


# Sockets that hold the ports free_port() handed out, for the test's lifetime.
_reserved = []


def free_port():
    """A free loopback port, reserved until this process ends: a socket stays bound
    to it with SO_REUSEADDR and never listens, so no other program's bind to port 0
    (a test running beside this one) takes it, while the listener it is for still
    binds it (the workers' listeners and Prometheus set SO_REUSEADDR). Released at
    once, such a port was now and then taken before the worker bound it."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", 0))
    _reserved.append(s)
    return s.getsockname()[1]


def start(cmd, stdin=subprocess.DEVNULL, **kwargs):
    """Starts a child that stop_children() ends however the test ends."""
    proc = subprocess.Popen(cmd, stdin=stdin, **kwargs)
    children.append(proc)
    return proc


def stop_children(grace=5.0):
    """Closes the children's stdin (the fixtures exit on EOF), then terminates what is
    still running, and kills what has not exited after `grace` seconds."""
    for proc in children:
        if proc.poll() is None and proc.stdin:
            try:
                proc.stdin.close()
            except OSError:
                pass
    for proc in children:
        if proc.poll() is None:
            proc.terminate()
    deadline = time.time() + grace
    for proc in children:
        try:
            proc.wait(timeout=max(0.1, deadline - time.time()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def start_prometheus(binary, tmp, config):
    """Starts Prometheus on a free loopback port with `config` (prometheus.yml text),
    its data and log under `tmp`. Returns the base URL of its HTTP API."""
    port = free_port()
    with open(tmp + "/prometheus.yml", "w") as f:
        f.write(config)
    start([binary, "--config.file=" + tmp + "/prometheus.yml",
           "--storage.tsdb.path=" + tmp + "/data",
           "--web.listen-address=127.0.0.1:%d" % port, "--log.level=warn"],
          stdout=subprocess.DEVNULL, stderr=open(tmp + "/prometheus.log", "w"))
    return "http://127.0.0.1:%d" % port


def query(base, expr):
    """An instant query; raises ValueError (naming the expression) when Prometheus
    refuses it."""
    url = base + "/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            body = json.load(r)
    except urllib.error.HTTPError as e:
        body = json.load(e)
    if body.get("status") != "success":
        raise ValueError("%s: %s: %s" % (expr, body.get("errorType"), body.get("error")))
    return body["data"]["result"]
