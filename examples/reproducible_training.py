"""Reproducible training in three lines: detops.enable_determinism, a seeded DataLoader with workers, and an
audit of the model's aten ops before the long GPU run. Runs on CPU too:
    python examples/reproducible_training.py
Two runs on one machine print the same weights, bit for bit. On CPU the weights come from stock kernels
(convolution, matmul) whose bits also depend on the intra-op thread count and the CPU's instruction set, so
the example prints the machine next to its checksum (docs/reproducibility.md, "Threads and machines").
"""

import hashlib

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

import detops


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.pool = nn.AdaptiveAvgPool2d((2, 2))  # (1, 1) would be a mean: nothing to throw
        self.bag = nn.EmbeddingBag(100, 8, mode="max")
        self.head = nn.Linear(8 * 4 + 8, 1)

    def forward(self, image, tokens):
        a = self.pool(torch.relu(self.conv(image))).flatten(1)
        b = self.bag(tokens)  # tokens: (batch, bag size)
        return self.head(torch.cat([a, b], 1))


def main():
    device = "cuda" if torch.cuda.is_available() else "cpu"
    detops.enable_determinism(0)  # 1. seeds, flag, cuDNN, cuBLAS
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(64, 3, 8, 8, generator=g), torch.randint(0, 100, (64, 5), generator=g),
                         torch.randn(64, 1, generator=g))
    loader = DataLoader(data, batch_size=8, shuffle=True, num_workers=2,
                        **detops.dataloader_kwargs(0))  # 2. seeded shuffling and workers
    model = Model().to(device)
    image, tokens, _ = data[:2]
    print(detops.audit(model, image.to(device), tokens.to(device)))  # 3. will it throw under the flag?

    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    for image, tokens, target in loader:
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(image.to(device), tokens.to(device)), target.to(device))
        loss.backward()
        optimizer.step()
    weights = b"".join(p.detach().cpu().contiguous().numpy().tobytes() for p in model.parameters())
    gpu = f", GPU {torch.cuda.get_device_name()}" if device == "cuda" else ""
    print(f"machine: {detops.machine_summary()}{gpu}")
    print(f"final loss {loss.item():.6f}, weight checksum {sum(p.double().sum().item() for p in model.parameters()):.12f}")
    print(f"weights sha256 {hashlib.sha256(weights).hexdigest()}")


if __name__ == "__main__":
    main()
