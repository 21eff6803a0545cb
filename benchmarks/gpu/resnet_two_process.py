# Two processes sharing GPU 0 train the pipeline tutorial's model (resnet_one_process.py's
# model; no RPC, no rpcjob), either taking turns (each batch of one, then the other's,
# passed by a pipe) or at the same time, as a pipeline's two shards on one GPU run.
# What sharing one GPU between two processes' CUDA contexts costs, beside the same
# model in one process (resnet_one_process.py). The tutorial's `xs.split(num_split)`
# makes micro-batches of num_split images (120 of 1 image for num_split 1): small
# batches are the pipeline's case.
#
#   python3 benchmarks/gpu/resnet_two_process.py [batches] [batch size] [turns|together]
import os
import sys
import time

import torch
import torch.multiprocessing as mp
import torch.nn as nn
import torch.optim as optim

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import resnet_one_process as one  # noqa: E402
import resnet_pipeline_torch as tutorial  # noqa: E402


def party(me, batches, n, turn_in, turn_out, times):
    device = torch.device("cuda:0")
    torch.manual_seed(me)
    m = one.model(device)
    opt = optim.SGD(m.parameters(), lr=0.05)
    loss_fn = nn.MSELoss()
    classes = tutorial.num_classes
    labels = torch.zeros(n, classes).scatter_(1, torch.randint(0, classes, (n, 1)), 1).to(device)
    x = torch.randn(n, 3, tutorial.image_w, tutorial.image_h, device=device)
    mine = []
    for _ in range(batches):
        if turn_in is not None:
            turn_in.recv()
        t0 = time.time()
        opt.zero_grad()
        loss_fn(m(x), labels).backward()
        opt.step()
        torch.cuda.synchronize()
        mine.append(time.time() - t0)
        if turn_out is not None:
            turn_out.send(1)
    times.put((me, mine))


if __name__ == "__main__":
    batches = int(sys.argv[1]) if len(sys.argv) > 1 else 8
    n = int(sys.argv[2]) if len(sys.argv) > 2 else tutorial.batch_size
    together = len(sys.argv) > 3 and sys.argv[3] == "together"
    ctx = mp.get_context("spawn")
    a_in, a_out = ctx.Pipe(duplex=False)  # to party 0
    b_in, b_out = ctx.Pipe(duplex=False)  # to party 1
    times = ctx.SimpleQueue()
    if together:
        a_in = a_out = b_in = b_out = None
    procs = [ctx.Process(target=party, args=(0, batches, n, a_in, b_out, times)),
             ctx.Process(target=party, args=(1, batches, n, b_in, a_out, times))]
    for p in procs:
        p.start()
    if not together:
        a_out.send(1)  # party 0 first; each hands the turn to the other
    for p in procs:
        p.join()
    for _ in procs:
        me, mine = times.get()
        steady = sorted(mine[2:])
        how = "at the same time" if together else "taking turns"
        print(f"two processes {how}, batch {n}: process {me} first {mine[0]:.4f} s, "
              f"then median {steady[len(steady) // 2]:.4f} s per batch", flush=True)
