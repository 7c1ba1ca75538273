"""Two workloads of the model kinds that crash native code on an AMD EPYC Zen 4, on real data
(scikit-learn's bundled 8x8 digit scans), trained here in seconds:

* ``mlp``: two residual Gemm MLPs (:func:`~tests.isolation.repro_models.residual_mlp`'s shape,
  64 inputs): batch-1 copies that OpenVINO 2026.4 cannot compile at f32 on one thread there.
* ``encoder``: a 3-layer transformer encoder (d = 256) over the 8 rows of a scan: the zoo's
  float16 variants of its subgraphs crash ONNX Runtime 1.32 at ``ORT_ENABLE_ALL`` there.

:func:`write_workload` writes ``<name>.toml``, the models and ``eval.npz`` into a folder.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np


def _digits() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = (digits.images.astype(np.float32) / 16.0 - 0.5)
    y = digits.target.astype(np.int64)
    order = np.random.default_rng(0).permutation(len(y))
    train, test = order[:1200], order[1200:]
    return x[train], y[train], x[test], y[test]


def _train(net: object, x: np.ndarray, y: np.ndarray, epochs: int) -> None:
    import torch

    torch.manual_seed(0)
    model: torch.nn.Module = net  # type: ignore[assignment]
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-3)
    inputs, labels = torch.from_numpy(x), torch.from_numpy(y)
    for _ in range(epochs):
        for start in range(0, len(labels), 64):
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(inputs[start:start + 64]),
                                                     labels[start:start + 64])
            loss.backward()
            optimizer.step()
    model.eval()


def _mlp(hidden: int, depth: int) -> object:
    import torch
    from torch import nn

    class ResidualMLP(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.blocks = nn.ModuleList(
                nn.Sequential(nn.ReLU(), nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, 64))
                for _ in range(depth))
            self.head = nn.Sequential(nn.ReLU(), nn.Linear(64, 10))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            for block in self.blocks:
                x = x + block(x)
            return self.head(x)

    return ResidualMLP()


def _encoder() -> object:
    import torch
    from torch import nn

    class Encoder(nn.Module):
        def __init__(self, d: int = 256, layers: int = 3) -> None:
            super().__init__()
            self.embed = nn.Linear(8, d)
            layer = nn.TransformerEncoderLayer(d, 4, 4 * d, dropout=0.0, batch_first=True,
                                               norm_first=True)
            self.enc = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
            self.head = nn.Linear(d, 10)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(self.enc(self.embed(x)).mean(dim=1))

    return Encoder()


def _export(net: object, example: np.ndarray, path: Path) -> None:
    import torch

    torch.onnx.export(net, (torch.from_numpy(example[:1]),), str(path), input_names=["x"],
                      output_names=["logits"],
                      dynamic_axes={"x": {0: "batch"}, "logits": {0: "batch"}}, dynamo=False,
                      opset_version=17)


def write_workload(kind: str, folder: Path, samples: int | None = None) -> Path:
    """Write workload ``kind`` into ``folder``; its TOML's path. ``mlp``: two residual MLPs;
    ``encoder``: the encoder; ``both``: one MLP and the encoder, trained briefly (for tests).
    ``samples`` sets the profile's stitched-variant samples (default: the profiler's)."""
    folder.mkdir(parents=True, exist_ok=True)
    x_train, y_train, x_test, y_test = _digits()
    flat_train, flat_test = x_train.reshape(-1, 64), x_test.reshape(-1, 64)
    nets: dict[str, tuple[object, int]]
    if kind == "mlp":
        nets = {"mlp_a": (_mlp(64, 2), 30), "mlp_b": (_mlp(128, 3), 30)}
    elif kind == "encoder":
        nets = {"encoder": (_encoder(), 4)}
    elif kind == "both":
        nets = {"mlp_a": (_mlp(64, 2), 30), "encoder": (_encoder(), 1)}
    else:
        raise ValueError(f"unknown crash workload {kind!r}: mlp, encoder or both")
    data = {name: (x_train, x_test) if name == "encoder" else (flat_train, flat_test)
            for name in nets}
    lines = [f'name = "crash-{kind}"\n']
    if samples is not None:
        lines.append(f"[profile]\nsamples = {samples}\n")
    for name, (net, epochs) in nets.items():
        train, test = data[name]
        _train(net, train, y_train, epochs)
        _export(net, test, folder / f"{name}.onnx")
        np.savez(folder / f"{name}.npz", x=test, labels=y_test)
        lines.append(f'[[task]]\nname = "{name}"\nmodel = "{name}.onnx"\ndata = "{name}.npz"\n')
    toml = folder / f"crash-{kind}.toml"
    toml.write_text("\n".join(lines))
    return toml
