"""Reproducible DistributedDataParallel training on CPU: two processes (gloo, 127.0.0.1 only), each calling
detops.enable_determinism with one intra-op thread, a DistributedSampler with the run's seed, and seeded
DataLoader workers. Prints the final loss, a weight checksum and the SHA-256 of the weights' bytes; two runs
print the same.
    python examples/ddp_training.py [--world-size 2] [--seed 0] [--epochs 2] [--weights-out FILE]
"""

import argparse
import datetime
import faulthandler
import hashlib
import os
import socket
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

import detops

RANK_TIMEOUT_S = 120  # a rank still running after this exits with a traceback: nothing waits forever


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.pool = nn.AdaptiveAvgPool2d((2, 2))
        self.drop = nn.Dropout(0.2)  # draws from each rank's torch RNG
        self.head = nn.Linear(8 * 4, 1)

    def forward(self, image):
        return self.head(self.drop(self.pool(torch.relu(self.conv(image))).flatten(1)))


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def weight_bytes(model: nn.Module) -> bytes:
    return b"".join(p.detach().cpu().contiguous().numpy().tobytes() for p in model.parameters())


def train(rank: int, world_size: int, seed: int, epochs: int, weights_out: str) -> None:
    faulthandler.dump_traceback_later(RANK_TIMEOUT_S, exit=True)
    dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=world_size,
                            timeout=datetime.timedelta(seconds=60))
    try:
        # Per-rank RNG seeds (dropout masks and DataLoader workers differ between ranks, reproducibly); DDP
        # broadcasts rank 0's initial weights. One intra-op thread per rank: the stock CPU kernels' bits then
        # do not depend on how many cores the machine has.
        detops.enable_determinism(seed + rank, num_threads=1)
        g = torch.Generator().manual_seed(seed)  # the same data on every rank
        data = TensorDataset(torch.randn(96, 3, 8, 8, generator=g), torch.randn(96, 1, generator=g))
        # The sampler's seed must be the same on every rank: it shuffles the whole index list, then each rank
        # takes its share.
        sampler = DistributedSampler(data, num_replicas=world_size, rank=rank, shuffle=True, seed=seed)
        loader = DataLoader(data, batch_size=8, sampler=sampler, num_workers=1, persistent_workers=True,
                            **detops.dataloader_kwargs(seed + rank))
        model = DistributedDataParallel(Model())
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
        for epoch in range(epochs):
            sampler.set_epoch(epoch)  # a different, reproducible shuffle each epoch
            for image, target in loader:
                optimizer.zero_grad()
                loss = nn.functional.mse_loss(model(image), target)
                loss.backward()  # DDP all-reduces (averages) the gradients across ranks
                optimizer.step()
        digest = hashlib.sha256(weight_bytes(model.module)).hexdigest()
        digests = [None] * world_size
        dist.all_gather_object(digests, digest)
        losses = [None] * world_size
        dist.all_gather_object(losses, loss.item())
        if rank == 0:
            if len(set(digests)) != 1:
                raise RuntimeError(f"ranks hold different weights: {digests}")
            print(f"{world_size} ranks (gloo), every rank's weights identical; machine: {detops.machine_summary()}")
            checksum = sum(p.double().sum().item() for p in model.module.parameters())
            print(f"final loss (rank 0) {losses[0]:.6f}, weight checksum {checksum:.12f}")
            print(f"weights sha256 {digest}")
            if weights_out:
                with open(weights_out, "wb") as f:
                    f.write(weight_bytes(model.module))
    finally:
        dist.destroy_process_group()
        faulthandler.cancel_dump_traceback_later()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--weights-out", default="", help="write the final weights' raw bytes to this file")
    args = parser.parse_args(argv)
    if args.world_size < 1 or args.epochs < 1:
        parser.error("--world-size and --epochs must be at least 1")
    # Loopback only: the rendezvous (TCPStore) on 127.0.0.1 at a free port, gloo's connections on the
    # loopback interface.
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(free_port())
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo0" if sys.platform == "darwin" else "lo")
    mp.spawn(train, args=(args.world_size, args.seed, args.epochs, args.weights_out), nprocs=args.world_size,
             join=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
