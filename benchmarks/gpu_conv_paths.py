"""The stacked clients' grouped convolution, four ways, in one run (issue 37, section 2).

The vectorised executor runs K clients' convolutions as one grouped convolution: input
(N, K·C, H, W), weight (K·O, C, kh, kw), groups = K (``client/stacked_layers.StackedConv``).
On the GPU cuDNN picked ``implicit_convolve_sgemm`` for it, a kernel without tensor cores, 35 %
of a non-private round's device time (benchmarks/results/cohort_speed.md, run V). This times
forward + backward (input and weight gradients) of that convolution, interleaved, for

- ``default``: as the executor runs it now;
- ``benchmark``: ``torch.backends.cudnn.benchmark = True`` (cuDNN times its algorithms once
  per shape and keeps the fastest);
- ``channels_last``: input and weight in ``torch.channels_last`` memory format;
- ``unfold_bmm``: ``F.unfold`` then one batched matrix product over the K clients
  (K × (O × C·kh·kw) @ (C·kh·kw × N·L)), autograd through both;

and reports ms a pass, the achieved FLOP/s ÷ one large float32 matmul's on the same device
(8192² on a GPU, 2048² on a CPU) and each variant's largest difference from ``default``.
Shapes: MnistCNN's conv1 (1 → 32, 28², 5×5, pad 2) and conv2 (32 → 64, 14², 5×5, pad 2), K
clients of N examples each (``--clients``, ``--batch``).

    python benchmarks/gpu_conv_paths.py --device cuda --clients 64 --batch 10 --reps 20
    python benchmarks/gpu_conv_paths.py --device cpu --clients 2 --batch 2 --reps 1  # dry run
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

#: (name, C, O, side, kernel, padding) of MnistCNN's convolutions.
SHAPES = [("conv1", 1, 32, 28, 5, 2), ("conv2", 32, 64, 14, 5, 2)]
VARIANTS = ["default", "benchmark", "channels_last", "unfold_bmm"]


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _matmul_flops(device: torch.device) -> float:
    n = 8192 if device.type == "cuda" else 2048
    a = torch.randn(n, n, device=device)
    a @ a
    _sync(device)
    start = time.perf_counter()
    for _ in range(3):
        a @ a
    _sync(device)
    return 3 * 2 * n**3 / (time.perf_counter() - start)


def _unfold_bmm(x: torch.Tensor, w: torch.Tensor, k: int, pad: int) -> torch.Tensor:
    """The grouped convolution as unfold + one bmm over the K groups."""
    n, kc, h, _ = x.shape
    ko, c, kh, kw = w.shape
    o = ko // k
    cols = F.unfold(x, (kh, kw), padding=pad)  # N × K·C·kh·kw × L
    L = cols.shape[-1]
    cols = cols.view(n, k, c * kh * kw, L).permute(1, 2, 0, 3).reshape(k, c * kh * kw, n * L)
    y = torch.bmm(w.view(k, o, c * kh * kw), cols)  # K × O × N·L
    side = h + 2 * pad - kh + 1
    return y.view(k, o, n, side, side).permute(2, 0, 1, 3, 4).reshape(n, k * o, side, side)


def _pass(variant: str, x: torch.Tensor, w: torch.Tensor, k: int, pad: int) -> torch.Tensor:
    y = _unfold_bmm(x, w, k, pad) if variant == "unfold_bmm" else F.conv2d(x, w, None, 1, pad, 1, k)
    y.sum().backward()
    return y.detach()


def _grad_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    assert a.grad is not None and b.grad is not None  # both passes ran a backward
    return float((a.grad - b.grad).abs().max())


def _runner(
    inputs: dict[str, tuple[torch.Tensor, torch.Tensor]], clients: int, pad: int
) -> Callable[[str], torch.Tensor]:
    def run(v: str) -> torch.Tensor:
        torch.backends.cudnn.benchmark = v == "benchmark"
        x, w = inputs[v]
        x.grad = w.grad = None
        return _pass(v, x, w, clients, pad)

    return run


def time_variants(device: torch.device, clients: int, batch: int, reps: int) -> list[dict]:
    rows = []
    limit = _matmul_flops(device)
    for name, c, o, side, kernel, pad in SHAPES:
        g = torch.Generator(device="cpu").manual_seed(0)
        x0 = torch.randn(batch, clients * c, side, side, generator=g).to(device)
        w0 = torch.randn(clients * o, c, kernel, kernel, generator=g).to(device)
        flops = 3 * 2 * batch * clients * o * c * kernel * kernel * side * side  # fwd + 2 bwd
        inputs: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
        for v in VARIANTS:
            fmt = torch.channels_last if v == "channels_last" else torch.contiguous_format
            x = x0.clone().to(memory_format=fmt).requires_grad_(True)
            w = w0.clone().to(memory_format=fmt).requires_grad_(True)
            inputs[v] = (x, w)
        outs: dict[str, torch.Tensor] = {}
        times: dict[str, list[float]] = {v: [] for v in VARIANTS}
        run = _runner(inputs, clients, pad)

        for v in VARIANTS:  # warm-up (cudnn.benchmark's search happens here)
            outs[v] = run(v)
        _sync(device)
        for _ in range(reps):
            for v in VARIANTS:  # interleaved
                start = time.perf_counter()
                run(v)
                _sync(device)
                times[v].append(time.perf_counter() - start)
        torch.backends.cudnn.benchmark = False
        for v in VARIANTS:
            med = statistics.median(times[v])
            rows.append(
                {
                    "shape": name,
                    "variant": v,
                    "ms": med * 1e3,
                    "flops_over_matmul": flops / med / limit,
                    "max_abs_diff": float((outs[v] - outs["default"]).abs().max()),
                    "weight_grad_diff": _grad_diff(inputs[v][1], inputs["default"][1]),
                }
            )
    return rows


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--clients", type=int, default=64)
    p.add_argument("--batch", type=int, default=10)
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--json", default=None, help="write the rows there")
    args = p.parse_args(argv)
    device = torch.device(args.device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    rows = time_variants(device, args.clients, args.batch, args.reps)
    print(f"device {name}, torch {torch.__version__}, K = {args.clients}, N = {args.batch}")
    print("| shape | variant | ms (fwd+bwd) | FLOP/s ÷ matmul | max |Δy| | max |Δ∇W| |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['shape']} | {r['variant']} | {r['ms']:.2f} | {r['flops_over_matmul']:.3f} "
            f"| {r['max_abs_diff']:.1e} | {r['weight_grad_diff']:.1e} |"
        )
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"device": name, "args": vars(args), "rows": rows}, fh, indent=1)


if __name__ == "__main__":
    main()
