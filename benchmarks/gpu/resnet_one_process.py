# The pipeline tutorial's model (resnet_pipeline_torch.py's two shards) trained in
# ONE process on one GPU, no RPC: what its compute alone costs per batch, the
# floor under both pipelines' steady-state batches (batch 120 of 3x128x128, MSE
# loss against one-hot labels, SGD lr 0.05). Prints the cuDNN in use, then the
# per-batch times (forward+backward+step, synchronized) of the default settings
# and, for context, with cudnn.benchmark (autotuned algorithms) and channels_last.
#
#   python3 benchmarks/gpu/resnet_one_process.py [batches] [batch size]
import os
import sys
import time

import torch
import torch.nn as nn
import torch.optim as optim

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import resnet_pipeline_torch as tutorial  # noqa: E402


def model(device):
    s1 = tutorial.ResNetShard1(device)
    s2 = tutorial.ResNetShard2(device)
    return nn.Sequential(s1.seq, s2.seq, nn.Flatten(1), s2.fc)


def run(label, batches, n, benchmark=False, channels_last=False):
    torch.backends.cudnn.benchmark = benchmark
    device = torch.device("cuda:0")
    torch.manual_seed(0)
    m = model(device)
    if channels_last:
        m = m.to(memory_format=torch.channels_last)
    opt = optim.SGD(m.parameters(), lr=0.05)
    loss_fn = nn.MSELoss()
    classes = tutorial.num_classes
    idx = torch.randint(0, classes, (n, 1))
    times = []
    for _ in range(batches):
        x = torch.randn(n, 3, tutorial.image_w, tutorial.image_h)
        labels = torch.zeros(n, classes).scatter_(1, idx, 1).to(device)
        torch.cuda.synchronize()
        t0 = time.time()
        x = x.to(device)
        if channels_last:
            x = x.to(memory_format=torch.channels_last)
        opt.zero_grad()
        loss_fn(m(x), labels).backward()
        opt.step()
        torch.cuda.synchronize()
        times.append(time.time() - t0)
    steady = sorted(times[1:])
    print(f"{label}: first batch {times[0]:.4f} s, then median {steady[len(steady) // 2]:.4f} s "
          f"({n / steady[len(steady) // 2]:.0f} images/s)", flush=True)


if __name__ == "__main__":
    batches = int(sys.argv[1]) if len(sys.argv) > 1 else 6
    n = int(sys.argv[2]) if len(sys.argv) > 2 else tutorial.batch_size
    print(f"torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()} "
          f"(enabled {torch.backends.cudnn.enabled}), allow_tf32 cudnn "
          f"{torch.backends.cudnn.allow_tf32} matmul {torch.backends.cuda.matmul.allow_tf32}, "
          f"{torch.cuda.get_device_name(0)}", flush=True)
    run(f"default, batch {n}", batches, n)
    if n == tutorial.batch_size:
        run("cudnn.benchmark", batches, n, benchmark=True)
        run("channels_last", batches, n, channels_last=True)
