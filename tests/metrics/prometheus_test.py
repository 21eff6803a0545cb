#!/usr/bin/env python3
"""rpcjob metrics against a real Prometheus.

Starts two metrics_fixture workers that move tensors over real TensorPipe pipes
(worker1 sends to worker0, one pipe per channel) and a real `prometheus` on
loopback (free port, temporary config and data dir, 1 s scrapes) scraping both.
Then asserts:
  1. the scraped byte and transfer counters equal what was sent, per channel and
     direction, on both sides;
  2. every PromQL expression of the dashboard (template variables replaced by
     regexes matching everything) and of the rules file parses and returns data
     (alerts: the expression parses, and its left-hand side returns data);
  3. the dashboard's structure: a stable uid, the datasource/namespace/job/worker
     variables, and every panel with a datasource, a query and a unit.
Standard library only. Child processes are killed on any exit.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

from prom_harness import fail, query, start, start_prometheus, stop_children

CHANNELS = ["basic", "cma"]
MESSAGES = 25
SIZES = [1000, 65536, 3]
JOB = "promtest"

def wait_file(path, proc, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if os.path.exists(path):
            with open(path) as f:
                return f.read().split()
        if proc.poll() is not None:
            fail("%s exited with %s before it was ready" % (proc.args, proc.returncode))
        time.sleep(0.05)
    fail("timed out waiting for " + path)


def scalar(base, expr):
    result = query(base, expr)
    if len(result) != 1:
        raise ValueError("%s: expected one series, got %d" % (expr, len(result)))
    return float(result[0]["value"][1])


def substitute(expr):
    for var in ("namespace", "job", "worker"):
        expr = expr.replace("$" + var, ".*").replace("${%s}" % var, ".*")
    return expr.replace("$__rate_interval", "1m").replace("${__rate_interval}", "1m")


def rule_exprs(path):
    """(kind, name, expr) of every rule; a small reader for this file's style
    (inline `expr:` or a `|` block), so that no YAML module is needed."""
    rules, lines, i = [], open(path).read().splitlines(), 0
    kind = name = None
    while i < len(lines):
        line = lines[i]
        m = re.match(r"\s*-?\s*(record|alert):\s*(\S+)", line)
        if m:
            kind, name = m.group(1), m.group(2)
        m = re.match(r"(\s*)expr:\s*(.*)$", line)
        if m:
            indent, value = len(m.group(1)), m.group(2).strip()
            if value in ("|", ">", "|-", ">-"):
                block = []
                i += 1
                while i < len(lines) and (not lines[i].strip() or
                                          len(lines[i]) - len(lines[i].lstrip()) > indent):
                    block.append(lines[i].strip())
                    i += 1
                value = " ".join(block)
                rules.append((kind, name, value))
                continue
            rules.append((kind, name, value))
        i += 1
    return rules


def check_dashboard(dash):
    errors = []
    if dash.get("uid") != "rpcjob-transfers":
        errors.append("uid is %r" % dash.get("uid"))
    variables = {v["name"]: v for v in dash.get("templating", {}).get("list", [])}
    for name in ("datasource", "namespace", "job", "worker"):
        if name not in variables:
            errors.append("missing variable " + name)
    if variables.get("datasource", {}).get("type") != "datasource":
        errors.append("datasource variable is not of type datasource")
    panels = dash.get("panels", [])
    if not panels:
        errors.append("no panels")
    for p in panels:
        title = p.get("title", "<untitled>")
        if not p.get("datasource", {}).get("uid"):
            errors.append("%s: no datasource" % title)
        targets = p.get("targets") or []
        if not targets or not all(t.get("expr") for t in targets):
            errors.append("%s: no query" % title)
        if not p.get("fieldConfig", {}).get("defaults", {}).get("unit"):
            errors.append("%s: no unit" % title)
    return errors


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--fixture", required=True)
    parser.add_argument("--prometheus", required=True)
    parser.add_argument("--dashboard", required=True)
    parser.add_argument("--rules", required=True)
    args = parser.parse_args()

    dash = json.load(open(args.dashboard))
    errors = check_dashboard(dash)
    if errors:
        fail("dashboard structure: " + "; ".join(errors))

    tmp = tempfile.mkdtemp(prefix="rpcjob-prom-")
    serve = start([args.fixture, "serve", "--name", "worker0", "--job", JOB,
                   "--channels", ",".join(CHANNELS), "--ready-file", tmp + "/worker0"], stdin=subprocess.PIPE)
    port0, url = wait_file(tmp + "/worker0", serve)
    send = start([args.fixture, "send", "--name", "worker1", "--job", JOB, "--peer", "worker0",
                  "--to", url, "--channels", ",".join(CHANNELS), "--messages", str(MESSAGES),
                  "--sizes", ",".join(map(str, SIZES)), "--ready-file", tmp + "/worker1"], stdin=subprocess.PIPE)
    port1, _ = wait_file(tmp + "/worker1", send)

    base = start_prometheus(args.prometheus, tmp, """global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: [%s]
scrape_configs:
  - job_name: rpcjob
    static_configs:
      - targets: ['127.0.0.1:%s', '127.0.0.1:%s']
""" % (json.dumps(os.path.abspath(args.rules)), port0, port1))

    # Wait until Prometheus has at least 4 scrapes of both targets (rate() needs 2).
    deadline = time.time() + 45
    while True:
        try:
            result = query(base, 'count_over_time(up{job="rpcjob"}[1m]) >= 4')
            if len(result) == 2 and all(float(r["value"][1]) >= 4 for r in result):
                break
        except Exception:
            pass
        if time.time() > deadline:
            fail("prometheus never scraped both workers; log: " + open(tmp + "/prometheus.log").read()[-2000:])
        time.sleep(0.5)
    if query(base, 'up{job="rpcjob"} == 0'):
        fail("a target is down")

    # 1. Counters equal what was sent.
    checks = 0
    for channel in CHANNELS:
        for worker, direction, peer in (("worker1", "send", "worker0"), ("worker0", "recv", "worker1")):
            sel = ('{rpcjob_job="%s", worker="%s", channel="%s", direction="%s", peer="%s", '
                   'local_device="cpu", remote_device="cpu"}' % (JOB, worker, channel, direction, peer))
            transfers = scalar(base, "rpcjob_channel_transfers_total" + sel)
            nbytes = scalar(base, "rpcjob_channel_bytes_total" + sel)
            if transfers != MESSAGES * len(SIZES) or nbytes != MESSAGES * sum(SIZES):
                fail("%s %s %s: scraped %s transfers / %s bytes, sent %d / %d" %
                     (worker, channel, direction, transfers, nbytes, MESSAGES * len(SIZES),
                      MESSAGES * sum(SIZES)))
            checks += 1
    # Nothing flowed the other way.
    if query(base, 'rpcjob_channel_transfers_total{worker="worker1", direction="recv"}'):
        fail("worker1 received on a channel")
    print("ok: counters equal what was sent (%d series)" % checks)

    # 2. Every dashboard and rule expression parses and returns data.
    exprs = []
    for p in dash["panels"]:
        for t in p["targets"]:
            exprs.append(("panel " + p["title"], substitute(t["expr"])))
    for v in dash["templating"]["list"]:
        q = v.get("query")
        if isinstance(q, dict):
            q = q.get("query")
        if v.get("type") == "query" and q:
            m = re.match(r"label_values\((.*),\s*(\w+)\)$", q)
            if m:  # Grafana's label_values(selector, label): the selector must have data
                exprs.append(("variable " + v["name"], substitute(m.group(1))))
    for kind, name, expr in rule_exprs(args.rules):
        if kind == "alert":
            try:
                query(base, expr)
            except ValueError as e:
                fail("alert %s does not parse: %s" % (name, e))
            lhs = re.sub(r"\s*(==|!=|>=|<=|>|<)\s*[-+0-9.e]+\s*$", "", expr)
            if lhs == expr:
                fail("alert %s: no trailing threshold to strip" % name)
            exprs.append(("alert %s (without threshold)" % name, lhs))
        else:
            exprs.append(("record " + name, expr))
    empty = []
    for where, expr in exprs:
        try:
            result = query(base, expr)
        except ValueError as e:
            fail("%s: %s" % (where, e))
        if not result:
            empty.append("%s: %s" % (where, expr))
    if empty:
        fail("no data for:\n  " + "\n  ".join(empty))
    print("ok: %d dashboard and rule expressions parse and return data" % len(exprs))

    # The slow-channel alert fires for the basic pipe (its condition holds now).
    fallback = [e for k, n, e in rule_exprs(args.rules) if n == "RpcjobSlowChannelFallback"][0]
    if not any(r["metric"].get("channel") == "basic" for r in query(base, fallback)):
        fail("RpcjobSlowChannelFallback does not see the basic pipe")
    print("ok: slow-channel alert condition holds for basic")
    return 0


if __name__ == "__main__":
    try:
        code = main()
    finally:
        stop_children()
    sys.exit(code)
