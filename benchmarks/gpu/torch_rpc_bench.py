"""PyTorch's side of the GPU benchmark: torch.distributed.rpc (TensorPipe, device
map {0: 1}, or {0: 0} on a one-GPU machine: both processes on cuda:0) measured like
benchmarks/gpu/gpu_bench.cc, and the CUDA RPC recipe's experiment as the recipe has it
(MyModule, 10 iterations of forward and dist_autograd.backward, "cpu" and "cuda" modes;
one iteration first, untimed, as gpu_bench.cc does). One JSON line on stdout; the recipe's
own lines on stderr. RPCJOB_GPU_PEER_DEVICE picks the worker's GPU as in gpu_bench.cc.
The CPU figures (cpu_*) are measured as rpcjob-bench measures ours (worker/tools/pair_bench.cc):
small-call p50/p99 of 2000 sync calls with a one-element tensor after 200 untimed, the best
of 3 rounds of 20000 async calls with an int in flight at once, and the median of 20 (4 MB)
and 5 (400 MB) round trips of float32 CPU tensors, one untimed first."""
import json
import os
import sys
import time

import torch
import torch.distributed.autograd as dist_autograd
import torch.distributed.rpc as rpc
import torch.multiprocessing as mp


def identity(x):
    return x


_shard = {}


def linear1(x):
    if "m" not in _shard:
        torch.manual_seed(1)
        _shard["m"] = torch.nn.Linear(1000, 1000).to(x.device)
    with torch.no_grad():
        return _shard["m"](x)


class MyModule(torch.nn.Module):
    """The recipe's module."""

    def __init__(self, device, comm_mode):
        super().__init__()
        self.device = device
        self.linear = torch.nn.Linear(1000, 1000).to(device)
        self.comm_mode = comm_mode

    def forward(self, x):
        y = self.linear(x.to(self.device))
        return y.cpu() if self.comm_mode == "cpu" else y


def recipe(comm_mode, blocks=1):
    """The seconds of each of `blocks` blocks of 10 iterations, after one untimed."""
    lm = MyModule("cuda:0", comm_mode)
    # The recipe's cuda:1; cuda:0 on a one-GPU machine (the device map is {0: 0} there).
    rm = rpc.remote("worker1", MyModule, args=(f"cuda:{peer_device()}", comm_mode))
    x = torch.randn(1000, 1000).cuda(0)

    def iteration():
        with dist_autograd.context() as ctx:
            y = rm.rpc_sync().forward(lm(x))
            dist_autograd.backward(ctx, [y.sum()])

    iteration()
    torch.cuda.current_stream("cuda:0").synchronize()
    totals = []
    for _ in range(blocks):
        tik = time.time()
        for _ in range(10):
            iteration()
        torch.cuda.current_stream("cuda:0").synchronize()
        tok = time.time()
        print(f"{comm_mode} RPC total execution time: {tok - tik}", file=sys.stderr, flush=True)
        totals.append(tok - tik)
    return totals


def round_trips(x, warmup, n):
    out = []
    for i in range(warmup + n):
        t0 = time.perf_counter()
        y = rpc.rpc_sync("worker1", identity, args=(x,))
        torch.cuda.current_stream(0).synchronize()
        t1 = time.perf_counter()
        if i >= warmup:
            out.append(t1 - t0)
    out.sort()
    return out


def cpu_round_trips(x, warmup, n):
    out = []
    for i in range(warmup + n):
        t0 = time.perf_counter()
        rpc.rpc_sync("worker1", identity, args=(x,))
        t1 = time.perf_counter()
        if i >= warmup:
            out.append(t1 - t0)
    out.sort()
    return out


def cpu_async_rate(n):
    t0 = time.perf_counter()
    futures = [rpc.rpc_async("worker1", identity, args=(i,)) for i in range(n)]
    torch.futures.wait_all(futures)
    return n / (time.perf_counter() - t0)


def cpu_figures():
    small = cpu_round_trips(torch.ones(1), 200, 2000)
    rt4 = cpu_round_trips(torch.ones(1 << 20), 1, 20)  # 4 MiB, as at::ones({1 << 20})
    rt400 = cpu_round_trips(torch.ones(100 * 1000 * 1000), 1, 5)  # 400e6 bytes
    return {"cpu_small_rtt_p50_us": round(pct(small, 0.5) * 1e6, 2),
            "cpu_small_rtt_p99_us": round(pct(small, 0.99) * 1e6, 2),
            "cpu_async_calls_per_s": round(max(cpu_async_rate(20000) for _ in range(3))),
            "cpu_rtt_4mb_ms": round(pct(rt4, 0.5) * 1e3, 3),
            "cpu_rtt_400mb_ms": round(pct(rt400, 0.5) * 1e3, 3)}


def pct(v, p):
    return v[min(len(v) - 1, int(p * len(v)))]


def peer_device():
    env = os.environ.get("RPCJOB_GPU_PEER_DEVICE", "")
    if env:
        return int(env)
    return 1 if torch.cuda.device_count() > 1 else 0


def run(rank, port):
    peer = peer_device()
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    opts = rpc.TensorPipeRpcBackendOptions(num_worker_threads=16)
    if rank == 0:
        opts.set_device_map("worker1", {0: peer})
    rpc.init_rpc(f"worker{rank}", rank=rank, world_size=2, rpc_backend_options=opts)
    if rank == 0:
        small = torch.ones(1, device="cuda:0")
        mb4 = torch.ones(1000 * 1000, device="cuda:0")  # 4e6 bytes
        mb400 = torch.ones(100 * 1000 * 1000, device="cuda:0")  # 400e6 bytes
        # RPCJOB_BENCH_ONLY=recipe: the recipe alone (the round trips print as null).
        everything = os.environ.get("RPCJOB_BENCH_ONLY", "") != "recipe"
        s = round_trips(small, 200, 3000) if everything else [0]
        r4 = round_trips(mb4, 20, 200) if everything else [0]
        r400 = round_trips(mb400, 5, 40) if everything else [1]
        torch.manual_seed(0)
        lm = torch.nn.Linear(1000, 1000).to("cuda:0")
        x = torch.randn(1000, 1000, device="cuda:0")
        with torch.no_grad():
            rpc.rpc_sync("worker1", linear1, args=(lm(x),))
            torch.cuda.current_stream(0).synchronize()
            t0 = time.perf_counter()
            for _ in range(10):
                y = rpc.rpc_sync("worker1", linear1, args=(lm(x),))
            torch.cuda.current_stream(0).synchronize()
            split = time.perf_counter() - t0
        cpu = cpu_figures() if everything else {}
        recipe_cpu = recipe("cpu")[0]
        # As many blocks as gpu_bench.cc times (RPCJOB_BENCH_RECIPE_BLOCKS), their median.
        blocks = sorted(recipe("cuda", max(1, int(os.environ.get("RPCJOB_BENCH_RECIPE_BLOCKS", "7")))))
        recipe_cuda = blocks[len(blocks) // 2]
        trips = {"small_p50_us": round(pct(s, 0.5) * 1e6, 1),
                 "small_p99_us": round(pct(s, 0.99) * 1e6, 1),
                 "rt4mb_ms": round(pct(r4, 0.5) * 1e3, 3),
                 "rt400mb_ms": round(pct(r400, 0.5) * 1e3, 3),
                 "rt400mb_gbs": round(2 * 400e6 / 1e9 / pct(r400, 0.5), 1),
                 "rt400mb_p10_p90_ms": [round(pct(r400, 0.1) * 1e3, 3),
                                        round(pct(r400, 0.9) * 1e3, 3)]}
        if not everything:
            trips = {k: None for k in trips}
        print(json.dumps({"impl": "pytorch", "devices": f"cuda:0->cuda:{peer}",
                          "channel": "pytorch (TensorPipe's choice)", **trips,
                          "model_split_s": round(split, 4),
                          "recipe_cpu_rpc_s": round(recipe_cpu, 4),
                          "recipe_cuda_rpc_s": round(recipe_cuda, 4),
                          "recipe_cuda_rpc_blocks_s": [round(b, 4) for b in blocks],
                          **cpu}), flush=True)
    rpc.shutdown()


if __name__ == "__main__":
    mp.spawn(run, args=(int(sys.argv[1]) if len(sys.argv) > 1 else 29517,), nprocs=2, join=True)
