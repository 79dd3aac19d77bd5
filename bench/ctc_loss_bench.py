"""_ctc_loss_backward on CUDA: detops vs stock (nondeterministic, atomics), CUDA events, median of many.

Usage: DETOPS_LIBRARY=build/libdetops.so PYTHONPATH=python_shim python bench/ctc_loss_bench.py
"""

import statistics

import torch

import detops

SHAPES = [  # (T, B, C, L): speech-like character CTC, a large vocabulary, long targets
    (500, 32, 40, 100),
    (200, 64, 1000, 40),
    (1000, 8, 30, 300),
]


def median_ms(fn, reps=50):
    for _ in range(5):
        fn()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def main():
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    print("T,B,C,L,dtype,stock_ms,detops_ms,ratio")
    for T, B, C, L in SHAPES:
        for dtype in (torch.float32, torch.float64):
            g = torch.Generator().manual_seed(0)
            lp = torch.randn(T, B, C, generator=g, dtype=dtype).log_softmax(2).cuda()
            targets = torch.randint(1, C, (B, L), generator=g).cuda()
            il, tl = [T] * B, [L - b % 5 for b in range(B)]
            nll, la = torch.ops.aten._ctc_loss(lp, targets, il, tl, 0, False)
            grad = torch.ones(B, dtype=dtype, device="cuda")
            args = (grad, lp, targets, il, tl, nll, la, 0, True)
            with detops.mode("off"):
                stock = median_ms(lambda: torch.ops.aten._ctc_loss_backward(*args))
            ours = median_ms(lambda: torch.ops.detops._ctc_loss_backward(*args))
            print(f"{T},{B},{C},{L},{str(dtype)[6:]},{stock:.3f},{ours:.3f},{ours / stock:.2f}")


if __name__ == "__main__":
    main()
