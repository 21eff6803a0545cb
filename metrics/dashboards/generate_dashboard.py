#!/usr/bin/env python3
"""Generates rpcjob-transfers.json (run from metrics/: python3 dashboards/generate_dashboard.py).
Edit this file, not the JSON; commit both. tests/metrics/prometheus_test.py runs every query."""
import json
DS = {"type": "prometheus", "uid": "${datasource}"}
SEL = 'namespace=~"$namespace", rpcjob_job=~"$job", worker=~"$worker"'
SEND = ', direction="send"'
CLIENT = ', side="client"'
panels = []
state = {"y": 0}
def panel(title, exprs, unit, kind="timeseries", w=12, h=8, desc="", extra=None):
    pid = len(panels) + 1
    x = 0 if w == 24 or sum(p["gridPos"]["w"] for p in panels) % 24 == 0 else 12
    p = {
        "id": pid, "type": kind, "title": title, "description": desc,
        "datasource": DS,
        "gridPos": {"x": x, "y": state["y"], "w": w, "h": h},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "targets": [dict({"refId": chr(65 + i), "datasource": DS, "expr": e, "legendFormat": l},
                         **({"format": "table", "instant": True} if kind == "table" else {}))
                    for i, (e, l) in enumerate(exprs)],
    }
    if extra: p.update(extra)
    panels.append(p)
    if w == 24 or x == 12: state["y"] += h
def rate(m, extra=""):
    return "rate(" + m + "{" + SEL + extra + "}[$__rate_interval])"
panel("Throughput per channel", [("sum by (channel) (" + rate("rpcjob_channel_bytes_total", SEND) + ")", "{{channel}}")], "Bps",
      desc="Bytes per second sent through each TensorPipe channel")
panel("Throughput per direction", [("sum by (direction) (" + rate("rpcjob_channel_bytes_total") + ")", "{{direction}}")], "Bps")
panel("Throughput per peer", [("sum by (worker, peer) (" + rate("rpcjob_channel_bytes_total", SEND) + ")", "{{worker}} -> {{peer}}")], "Bps",
      desc="Empty peer when the peer label is turned off (large jobs)")
panel("Transfers per second per channel", [("sum by (channel, direction) (" + rate("rpcjob_channel_transfers_total") + ")", "{{channel}} {{direction}}")], "ops")
def q(p):
    return ("histogram_quantile(%s, sum by (channel, le) (%s))" % (p, rate("rpcjob_channel_transfer_duration_seconds_bucket")), "p%d {{channel}}" % int(p * 100))
panel("Transfer latency percentiles per channel", [q(0.5), q(0.9), q(0.99)], "s",
      desc="From a channel's send/recv call to its completion; for CUDA channels the enqueue time unless CUDA-event timing is on")
panel("Channel error rate", [("sum by (channel, direction) (" + rate("rpcjob_channel_errors_total") + ")", "{{channel}} {{direction}}")], "ops")
panel("Transport throughput", [("sum by (transport, direction) (" + rate("rpcjob_transport_bytes_total") + ")", "{{transport}} {{direction}}")], "Bps")
panel("RPC calls in flight", [("sum by (worker, side) (rpcjob_rpc_in_flight{" + SEL + "})", "{{worker}} {{side}}")], "short")
panel("Channel selection matrix", [("max by (worker, peer, local_device, remote_device, channel) (rpcjob_channel_selected{" + SEL + "}) == 1", "")], "short",
      kind="table", w=24, desc="The channel TensorPipe selected for each worker, peer and device pair",
      extra={"transformations": [{"id": "labelsToFields", "options": {}}]})
def rq(p):
    return ("histogram_quantile(%s, sum by (function, le) (%s))" % (p, rate("rpcjob_rpc_duration_seconds_bucket", CLIENT)), "p%d {{function}}" % int(p * 100))
panel("RPC latency by function (client)", [rq(0.5), rq(0.99)], "s")
panel("RPC calls per second by function and status", [("sum by (function, status) (" + rate("rpcjob_rpc_calls_total", CLIENT) + ")", "{{function}} {{status}}")], "reqps")
panel("Pipe handshakes", [("sum by (worker, peer) (increase(rpcjob_pipe_handshakes_total{" + SEL + "}[$__rate_interval]))", "{{worker}} -> {{peer}}"),
                          ("histogram_quantile(0.99, sum by (le) (" + rate("rpcjob_pipe_handshake_duration_seconds_bucket") + "))", "p99 handshake seconds")], "short")
panel("Transport connections opened", [("sum by (transport, peer) (increase(rpcjob_transport_connections_total{" + SEL + "}[$__rate_interval]))", "{{transport}} {{peer}}")], "short")
panel("Workers", [('max by (worker, rank, rpcjob_job, node) (rpcjob_worker_info{rpcjob_job=~"$job", worker=~"$worker"})', "")], "short",
      kind="table", w=24, extra={"transformations": [{"id": "labelsToFields", "options": {}}]})

def var(name, label, query):
    return {"name": name, "label": label, "type": "query", "datasource": DS,
            "query": {"query": query, "refId": name}, "definition": query,
            "refresh": 2, "includeAll": True, "multi": True, "allValue": ".*",
            "current": {"selected": True, "text": ["All"], "value": ["$__all"]}, "sort": 1}
dash = {
  "uid": "rpcjob-transfers",
  "title": "rpcjob: transfers and RPCs",
  "description": "Per-channel TensorPipe transfer metrics and RPC metrics exported by rpcjob workers (metrics/README.md)",
  "tags": ["rpcjob"], "schemaVersion": 39, "version": 1, "editable": True,
  "time": {"from": "now-1h", "to": "now"}, "refresh": "30s",
  "templating": {"list": [
    {"name": "datasource", "label": "Data source", "type": "datasource", "query": "prometheus",
     "current": {}, "hide": 0},
    var("namespace", "Namespace", "label_values(rpcjob_worker_info, namespace)"),
    var("job", "RpcJob", 'label_values(rpcjob_worker_info{namespace=~"$namespace"}, rpcjob_job)'),
    var("worker", "Worker", 'label_values(rpcjob_worker_info{namespace=~"$namespace", rpcjob_job=~"$job"}, worker)'),
  ]},
  "panels": panels,
}
with open("dashboards/rpcjob-transfers.json", "w") as f:
    json.dump(dash, f, indent=2)
    f.write("\n")
