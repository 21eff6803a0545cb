#!/usr/bin/env python3
"""rpcjob-worker's metrics against a real Prometheus.

Real `rpcjob-worker` processes exchange tensors with the deterministic `send`
workload (rank 0 sends COUNT uint8 tensors of BYTES bytes to every peer by RPC;
above the 64 KiB inline limit each travels by channel, once, and the answer is
None) and a real `prometheus` (loopback, free port, temporary config and data
dir, 1 s scrapes) scrapes every worker. Two jobs, so that two channels are seen:

  job A: 3 workers, channels [basic], metrics port from the assignment's
         metricsPort, RPCJOB_METRICS_FILE set, ended with SIGTERM;
  job B: 2 workers, channels [mpt], metrics port from --metrics-port.

Asserted from Prometheus:
  1. per worker, channel, direction and peer, the byte and transfer counters
     equal what was sent, and no other channel moved anything;
  2. RPC calls by function and status on both sides, in-flight back to 0,
     one pipe handshake per peer, the selected-channel gauge, the info metric;
  3. /healthz and /readyz answer 200.
Then job A gets SIGTERM: its workers die of the signal and leave their final
metrics files behind, which parse and hold the same counts. Job C (2 workers,
default channels, no port, RPCJOB_METRICS_FILE) exits normally and its files
hold the bytes on the channel it selected.
Standard library only; children are killed on any exit.
"""

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

from prom_harness import fail, free_port, query, start, start_prometheus, stop_children

BYTES = 100000  # > 64 KiB: goes by channel
COUNT = 20

def values(base, expr, by):
    """{tuple(label values of `by`): value} of an instant query."""
    return {tuple(r["metric"].get(k, "") for k in by): float(r["value"][1])
            for r in query(base, expr)}


def http_status(url):
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def parse_text(text):
    """Prometheus text format -> {(name, frozenset(labels)): value}; raises on a bad line."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)(\s+\d+)?$', line)
        if not m:
            raise ValueError("bad line: %r" % line)
        labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(3) or ""))
        out[(m.group(1), frozenset(labels.items()))] = float(m.group(4))
    return out


def file_series(parsed, name, **labels):
    return [v for (n, ls), v in parsed.items()
            if n == name and all((k, val) in ls for k, val in labels.items())]


class Job:
    def __init__(self, tmp, name, size, channels, port_from):
        self.name, self.size, self.channels, self.port_from = name, size, channels, port_from
        self.workers = ["%s%d" % (name[-1], r) for r in range(size)]
        self.rpc_ports = [free_port() for _ in range(size)]
        self.metrics_ports = [free_port() for _ in range(size)] if port_from else [0] * size
        self.dir = os.path.join(tmp, name)
        os.makedirs(self.dir)
        assignment = {
            "apiVersion": "rpcjob.dev/v1alpha1", "kind": "Assignment",
            "job": {"name": name, "namespace": "default"},
            "channels": channels,
            "workers": [{"name": w, "rank": r, "group": "g",
                         "address": "127.0.0.1:%d" % self.rpc_ports[r],
                         "metricsPort": self.metrics_ports[r] if port_from == "assignment" else 0,
                         "node": "node-%s" % w} for r, w in enumerate(self.workers)],
        }
        self.path = os.path.join(self.dir, "assignment.json")
        with open(self.path, "w") as f:
            json.dump(assignment, f)
        self.procs = []

    def metrics_file(self, r):
        return os.path.join(self.dir, "%s.prom" % self.workers[r])

    def launch(self, binary, hold, with_file):
        for r, w in enumerate(self.workers):
            env = dict(os.environ)
            for k in list(env):
                if k.startswith("RPCJOB_"):
                    del env[k]
            env.update({"RPCJOB_ASSIGNMENT": self.path, "RPCJOB_WORKER_NAME": w})
            if with_file:
                env["RPCJOB_METRICS_FILE"] = self.metrics_file(r)
            cmd = [binary, "send", "--bytes", str(BYTES), "--count", str(COUNT)]
            if hold:
                cmd += ["--hold-s", str(hold)]
            if self.port_from == "flag":
                cmd += ["--metrics-port", str(self.metrics_ports[r])]
            out = open(os.path.join(self.dir, w + ".log"), "w")
            self.procs.append(start(cmd, env=env, stdout=out, stderr=subprocess.STDOUT))

    def log(self, r):
        return open(os.path.join(self.dir, self.workers[r] + ".log")).read()

    def wait_sent(self, timeout=90):
        deadline = time.time() + timeout
        last = self.workers[-1]
        while time.time() < deadline:
            if ("to %s\n" % last) in self.log(0):
                return
            for r, p in enumerate(self.procs):
                if p.poll() is not None:
                    fail("%s exited with %s:\n%s" % (self.workers[r], p.returncode, self.log(r)))
            time.sleep(0.2)
        fail("%s: rank 0 never finished sending:\n%s" % (self.name, self.log(0)))


def check_job(base, job, channel):
    """The Prometheus assertions for one job; returns the number of equal counter series."""
    w0, peers = job.workers[0], job.workers[1:]
    sel = 'rpcjob_job="%s"' % job.name
    # Wait until the last scrape saw the whole run (the calls counter is final).
    want_calls = COUNT * len(peers)
    deadline = time.time() + 30
    while True:
        got = values(base, 'rpcjob_rpc_calls_total{%s, worker="%s", side="client", '
                           'function="rpcjob.sink", status="ok"}' % (sel, w0), ["worker"])
        if got.get((w0,)) == want_calls:
            break
        if time.time() > deadline:
            fail("%s: client calls never reached %d: %s" % (job.name, want_calls, got))
        time.sleep(0.5)
    time.sleep(2.5)  # two more scrapes: the channel counters are final too

    # 1. Channel counters: exactly what was sent, and nothing else.
    by = ["worker", "channel", "direction", "peer", "local_device", "remote_device"]
    expected = {}
    for p in peers:
        expected[(w0, channel, "send", p, "cpu", "cpu")] = (COUNT, COUNT * BYTES)
        expected[(p, channel, "recv", w0, "cpu", "cpu")] = (COUNT, COUNT * BYTES)
    transfers = values(base, "rpcjob_channel_transfers_total{%s} > 0" % sel, by)
    nbytes = values(base, "rpcjob_channel_bytes_total{%s} > 0" % sel, by)
    got = {k: (transfers.get(k), nbytes.get(k)) for k in set(transfers) | set(nbytes)}
    if got != expected:
        fail("%s: channel counters\n  scraped  %s\n  expected %s" %
             (job.name, sorted(got.items()), sorted(expected.items())))
    errors = values(base, "rpcjob_channel_errors_total{%s} > 0" % sel, by)
    if errors:
        fail("%s: channel errors %s" % (job.name, errors))
    for k, (t, b) in sorted(expected.items()):
        print("  %s %-6s %-5s %-4s peer %s: %d transfers, %d bytes (sent %d x %d)" %
              (job.name, k[0], k[1], k[2], k[3], t, b, COUNT, BYTES))

    # 2. RPC level.
    calls = values(base, 'rpcjob_rpc_calls_total{%s, function="rpcjob.sink"} > 0' % sel,
                   ["worker", "side", "status"])
    want = {(w0, "client", "ok"): float(want_calls)}
    want.update({(p, "server", "ok"): float(COUNT) for p in peers})
    if calls != want:
        fail("%s: sink calls %s, expected %s" % (job.name, calls, want))
    inflight = values(base, "rpcjob_rpc_in_flight{%s}" % sel, ["worker", "side"])
    if len(inflight) != 2 * job.size or any(v != 0 for v in inflight.values()):
        fail("%s: in-flight %s" % (job.name, inflight))
    hist = values(base, 'rpcjob_rpc_duration_seconds_count{%s, function="rpcjob.sink"}' % sel,
                  ["worker", "side"])
    if hist.get((w0, "client")) != want_calls:
        fail("%s: latency histogram count %s" % (job.name, hist))
    handshakes = values(base, "rpcjob_pipe_handshakes_total{%s}" % sel, ["worker", "peer"])
    want = {(a, b): 1.0 for a in job.workers for b in job.workers}  # eager pipes, self included
    if handshakes != want:
        fail("%s: handshakes %s, expected %s" % (job.name, handshakes, want))
    selected = values(base, "rpcjob_channel_selected{%s} == 1" % sel,
                      ["worker", "peer", "local_device", "remote_device", "channel"])
    want = {(a, b, "cpu", "cpu", channel): 1.0 for a in job.workers for b in job.workers}
    if selected != want:
        fail("%s: selected channels %s, expected %s" % (job.name, selected, want))
    info = values(base, "rpcjob_worker_info{%s}" % sel, ["worker", "rank", "rpcjob_job", "node"])
    want = {(w, str(r), job.name, "node-" + w): 1.0 for r, w in enumerate(job.workers)}
    if info != want:
        fail("%s: info %s, expected %s" % (job.name, info, want))

    # 3. Health endpoints.
    for port in job.metrics_ports:
        for path in ("/healthz", "/readyz"):
            status = http_status("http://127.0.0.1:%d%s" % (port, path))
            if status != 200:
                fail("%s: %s answered %s" % (job.name, path, status))
    return len(expected)


def check_files(job, channel):
    for r, w in enumerate(job.workers):
        path = job.metrics_file(r)
        if not os.path.exists(path):
            fail("%s: no metrics file %s; log:\n%s" % (job.name, path, job.log(r)))
        if any(n.startswith(os.path.basename(path) + ".tmp") for n in os.listdir(job.dir)):
            fail("%s: a temporary file was left behind" % job.name)
        try:
            parsed = parse_text(open(path).read())
        except ValueError as e:
            fail("%s: %s does not parse: %s" % (job.name, path, e))
        if r == 0:
            for p in job.workers[1:]:
                b = file_series(parsed, "rpcjob_channel_bytes_total", channel=channel,
                                direction="send", peer=p, worker=w)
                if b != [COUNT * BYTES]:
                    fail("%s: file %s: send bytes to %s on %s: %s" % (job.name, path, p, channel, b))
        else:
            b = file_series(parsed, "rpcjob_channel_bytes_total", channel=channel,
                            direction="recv", peer=job.workers[0], worker=w)
            if b != [COUNT * BYTES]:
                fail("%s: file %s: recv bytes on %s: %s" % (job.name, path, channel, b))
        if file_series(parsed, "rpcjob_worker_info", worker=w) != [1.0]:
            fail("%s: file %s: no worker info" % (job.name, path))
    print("ok: %s: %d metrics files written, parse, and hold the sent bytes on %s" %
          (job.name, job.size, channel))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--worker", required=True)
    parser.add_argument("--prometheus", required=True)
    args = parser.parse_args()
    tmp = tempfile.mkdtemp(prefix="rpcjob-wprom-")

    job_a = Job(tmp, "mtest-a", 3, ["basic"], "assignment")
    job_b = Job(tmp, "mtest-b", 2, ["mpt"], "flag")
    job_a.launch(args.worker, hold=120, with_file=True)
    job_b.launch(args.worker, hold=120, with_file=False)

    targets = ["127.0.0.1:%d" % p for j in (job_a, job_b) for p in j.metrics_ports]
    base = start_prometheus(args.prometheus, tmp, """global:
  scrape_interval: 1s
scrape_configs:
  - job_name: rpcjob
    static_configs:
      - targets: %s
""" % json.dumps(targets))

    job_a.wait_sent()
    job_b.wait_sent()
    deadline = time.time() + 45
    while True:
        try:
            up = values(base, 'up{job="rpcjob"} == 1', ["instance"])
            if len(up) == len(targets):
                break
        except Exception:
            pass
        if time.time() > deadline:
            fail("prometheus never scraped every worker; log: " +
                 open(tmp + "/prometheus.log").read()[-2000:])
        time.sleep(0.5)

    n = check_job(base, job_a, "basic") + check_job(base, job_b, "mpt")
    print("ok: %d channel series equal what was sent; RPC calls, in-flight, handshakes, "
          "channel selection, info and health endpoints as expected" % n)

    # SIGTERM: the workers die of it and leave their final metrics behind.
    for p in job_a.procs:
        p.send_signal(signal.SIGTERM)
    for r, p in enumerate(job_a.procs):
        try:
            code = p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            fail("%s ignored SIGTERM" % job_a.workers[r])
        if code != -signal.SIGTERM:
            fail("%s: exit %s after SIGTERM, expected death by SIGTERM" % (job_a.workers[r], code))
    check_files(job_a, "basic")

    # Normal exit: default channels, no endpoint, the file only.
    job_c = Job(tmp, "mtest-c", 2, [], None)
    job_c.launch(args.worker, hold=0, with_file=True)
    for r, p in enumerate(job_c.procs):
        try:
            code = p.wait(timeout=90)
        except subprocess.TimeoutExpired:
            fail("%s did not finish" % job_c.workers[r])
        if code != 0:
            fail("%s exited with %s:\n%s" % (job_c.workers[r], code, job_c.log(r)))
    parsed = parse_text(open(job_c.metrics_file(0)).read())
    chosen = [dict(ls)["channel"] for (n, ls), v in parsed.items()
              if n == "rpcjob_channel_selected" and v == 1 and ("peer", "c1") in ls]
    if len(chosen) != 1:
        fail("mtest-c: selected channel for c1: %s" % chosen)
    check_files(job_c, chosen[0])
    return 0


if __name__ == "__main__":
    code = 1
    try:
        code = main()
    finally:
        stop_children()
    sys.exit(code)
