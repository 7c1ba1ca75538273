"""Small trained models for the compressor tests and benchmark, cut into subgraphs.

Two models are trained on sklearn's ``load_digits`` (8×8 grey images, 10 classes) in a few
seconds each and exported to ONNX (opset 17, dynamic batch):

* ``cnn``: conv-relu ×2, max-pool, conv-relu, max-pool, flatten, fc-relu, fc. Cut after the
  first max-pool: part 0 holds conv1 (prunable into conv2) and conv2 (its output is the boundary);
  part 1 holds conv3 (prunable through pool/flatten into fc1) and fc1 (prunable into fc2).
* ``transformer``: each image row is a token (8 tokens × 8 features) with a float attention mask
  as a second input; embedding, two pre-norm blocks (2-head self-attention + GELU FFN, both with
  residuals), mean-pool, classifier. Cut after block 0: part 1 takes the hidden state *and* the
  mask, like a real transformer subgraph.

Everything here is test scaffolding; the compressors never import it.
"""

from __future__ import annotations

import io
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import onnx
import onnx.utils


@dataclass(frozen=True)
class TrainedModel:
    """A trained ONNX model, its held-out data and the tensor names to cut it at."""

    name: str
    model: onnx.ModelProto
    calibration: dict[str, np.ndarray]
    test_inputs: dict[str, np.ndarray]
    test_labels: np.ndarray
    cut_tensors: tuple[str, ...]


def _digits(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    data = load_digits()
    images = (data.images / 16.0).astype(np.float32)
    images = (images - 0.3) / 0.4
    return train_test_split(
        images, data.target.astype(np.int64), test_size=0.3, random_state=seed,
        stratify=data.target,
    )


def _train(net, inputs: Sequence[np.ndarray], labels: np.ndarray, epochs: int, seed: int) -> None:
    import torch

    # One thread: on a shared two-core machine this is several times faster than two.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        torch.manual_seed(seed)
        tensors = [torch.from_numpy(x) for x in inputs]
        target = torch.from_numpy(labels)
        optimiser = torch.optim.Adam(net.parameters(), lr=3e-3)
        generator = torch.Generator().manual_seed(seed)
        net.train()
        for _ in range(epochs):
            order = torch.randperm(len(labels), generator=generator)
            for start in range(0, len(labels), 64):
                batch = order[start : start + 64]
                optimiser.zero_grad()
                logits = net(*[t[batch] for t in tensors])
                torch.nn.functional.cross_entropy(logits, target[batch]).backward()
                optimiser.step()
        net.eval()
    finally:
        torch.set_num_threads(threads)


def _export(net, example: Sequence[np.ndarray], names: Sequence[str]) -> onnx.ModelProto:
    import torch

    buffer = io.BytesIO()
    # The TorchScript exporter is deprecated but gives plain opset-17 graphs without onnxscript.
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.onnx.export(
            net, tuple(torch.from_numpy(x[:2]) for x in example), buffer,
            input_names=list(names), output_names=["logits"], opset_version=17,
            dynamic_axes={**{n: {0: "batch"} for n in names}, "logits": {0: "batch"}},
            dynamo=False,
        )
    return onnx.shape_inference.infer_shapes(onnx.load_from_string(buffer.getvalue()))


def _torch_net(kind: str):
    import torch
    from torch import nn

    class Cnn(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
            self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
            self.conv3 = nn.Conv2d(32, 48, 3, padding=1)
            self.fc1 = nn.Linear(48 * 2 * 2, 96)
            self.fc2 = nn.Linear(96, 10)

        def forward(self, x):
            x = torch.relu(self.conv1(x))
            x = torch.max_pool2d(torch.relu(self.conv2(x)), 2)
            x = torch.max_pool2d(torch.relu(self.conv3(x)), 2)
            return self.fc2(torch.relu(self.fc1(torch.flatten(x, 1))))

    class Block(nn.Module):
        def __init__(self, dim: int, heads: int, hidden: int) -> None:
            super().__init__()
            self.heads = heads
            self.norm1 = nn.LayerNorm(dim)
            self.qkv = nn.ModuleList(nn.Linear(dim, dim) for _ in range(3))
            self.proj = nn.Linear(dim, dim)
            self.norm2 = nn.LayerNorm(dim)
            self.ffn1 = nn.Linear(dim, hidden)
            self.ffn2 = nn.Linear(hidden, dim)

        def forward(self, x, mask):
            n, s, d = x.shape
            h = self.norm1(x)
            q, k, v = (lin(h).reshape(n, s, self.heads, d // self.heads).transpose(1, 2)
                       for lin in self.qkv)
            scores = q @ k.transpose(2, 3) / (d // self.heads) ** 0.5
            scores = scores + (1.0 - mask)[:, None, None, :] * -1e4
            attended = (scores.softmax(-1) @ v).transpose(1, 2).reshape(n, s, d)
            x = x + self.proj(attended)
            return x + self.ffn2(nn.functional.gelu(self.ffn1(self.norm2(x))))

    class Transformer(nn.Module):
        def __init__(self, dim: int = 32) -> None:
            super().__init__()
            self.embed = nn.Linear(8, dim)
            self.position = nn.Parameter(torch.randn(1, 8, dim) * 0.1)
            self.blocks = nn.ModuleList(Block(dim, 2, 4 * dim) for _ in range(2))
            self.norm = nn.LayerNorm(dim)
            self.head = nn.Linear(dim, 10)

        def forward(self, x, mask):
            h = self.embed(x) + self.position
            for block in self.blocks:
                h = block(h, mask)
            return self.head(self.norm(h).mean(1))

    torch.manual_seed(0)
    return Cnn() if kind == "cnn" else Transformer()


def load_or_train(name: str) -> TrainedModel:
    """``train_cnn()`` or ``train_transformer()``, cached in the sparseloom cache directory.

    The cache key is a hash of this file, so editing the models or the training retrains.
    Only the ONNX model is cached; the data split is deterministic and rebuilt in milliseconds.
    """
    from sparseloom.core.cache import cache_dir, file_hash

    trainer = {"cnn": train_cnn, "transformer": train_transformer}[name]
    path = cache_dir() / "tests-compressors" / f"{name}-{file_hash(__file__)[:16]}.onnx"
    if path.exists():
        return trainer(model=onnx.load(str(path)))
    trained = trainer()
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(trained.model, str(path.with_suffix(".tmp")))
    path.with_suffix(".tmp").replace(path)
    return trained


def _tensor_after(model: onnx.ModelProto, op_type: str, occurrence: int) -> str:
    """The output of the ``occurrence``-th node of ``op_type`` (0-based)."""
    found = [node.output[0] for node in model.graph.node if node.op_type == op_type]
    return found[occurrence]


def train_cnn(seed: int = 0, model: onnx.ModelProto | None = None) -> TrainedModel:
    """Train and export the digits CNN (≈ 5 s), or wrap an already trained ``model``."""
    x_train, x_test, y_train, y_test = _digits(seed)
    x_train, x_test = x_train[:, None], x_test[:, None]
    if model is None:
        net = _torch_net("cnn")
        _train(net, [x_train], y_train, epochs=10, seed=seed)
        model = _export(net, [x_train], ["image"])
    cut = _tensor_after(model, "MaxPool", 0)
    return TrainedModel("cnn", model, {"image": x_train[:256]}, {"image": x_test}, y_test, (cut,))


def train_transformer(seed: int = 0, model: onnx.ModelProto | None = None) -> TrainedModel:
    """Train and export the digits transformer with a mask input (≈ 7 s), or wrap ``model``."""
    x_train, x_test, y_train, y_test = _digits(seed)
    mask_train = np.ones(x_train.shape[:2], np.float32)
    mask_test = np.ones(x_test.shape[:2], np.float32)
    if model is None:
        net = _torch_net("transformer")
        _train(net, [x_train, mask_train], y_train, epochs=12, seed=seed)
        model = _export(net, [x_train, mask_train], ["tokens", "mask"])
    # Block 0's output is the last Add (its second residual) named under /blocks.0/.
    cut = [n.output[0] for n in model.graph.node
           if n.op_type == "Add" and n.name.startswith("/blocks.0/")][-1]
    return TrainedModel(
        "transformer", model, {"tokens": x_train[:256], "mask": mask_train[:256]},
        {"tokens": x_test, "mask": mask_test}, y_test, (cut,),
    )


def split(model: onnx.ModelProto, cut_tensors: Sequence[str]) -> list[onnx.ModelProto]:
    """Cut ``model`` at ``cut_tensors`` (in order) into consecutive subgraphs.

    Each part's inputs are the previous cut tensor plus whatever original graph inputs it
    still needs (e.g. the attention mask), so every part is a realistic zoo subgraph.
    """
    extractor = onnx.utils.Extractor(model)
    graph_inputs = [i.name for i in model.graph.input]
    outputs = [o.name for o in model.graph.output]
    stages = [[c] for c in cut_tensors] + [outputs]
    parts: list[onnx.ModelProto] = []
    available = list(graph_inputs)
    for stage_outputs in stages:
        part = extractor.extract_model(available, stage_outputs)
        used = {name for node in part.graph.node for name in node.input}
        keep = [i for i in part.graph.input if i.name in used]
        del part.graph.input[:]
        part.graph.input.extend(keep)
        part = onnx.shape_inference.infer_shapes(part)
        onnx.checker.check_model(part)
        parts.append(part)
        available = [n for n in graph_inputs if n != graph_inputs[0]] + list(stage_outputs)
    return parts


def run_chain(parts: Sequence[onnx.ModelProto], inputs: Mapping[str, np.ndarray]
              ) -> dict[str, np.ndarray]:
    """Run ``parts`` in order on ONNX Runtime CPU, feeding each the tensors it names."""
    import onnxruntime as ort

    tensors = dict(inputs)
    for part in parts:
        session = ort.InferenceSession(part.SerializeToString(), providers=["CPUExecutionProvider"])
        feed = {i.name: tensors[i.name] for i in session.get_inputs()}
        tensors.update(zip([o.name for o in session.get_outputs()], session.run(None, feed),
                           strict=True))
    return tensors


def part_inputs(trained: TrainedModel, parts: Sequence[onnx.ModelProto], position: int,
                inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The inputs of ``parts[position]`` computed by the dense prefix from ``inputs``."""
    tensors = run_chain(parts[:position], inputs) if position else dict(inputs)
    return {i.name: tensors[i.name] for i in parts[position].graph.input}


def accuracy(parts: Sequence[onnx.ModelProto], trained: TrainedModel) -> float:
    """Top-1 accuracy of the chained ``parts`` on the held-out split."""
    logits = run_chain(parts, trained.test_inputs)[trained.model.graph.output[0].name]
    return float((logits.argmax(-1) == trained.test_labels).mean())


def initializer(name: str, array: np.ndarray) -> onnx.TensorProto:
    """A float32 initializer."""
    from onnx import numpy_helper

    return numpy_helper.from_array(np.asarray(array, dtype=np.float32), name)


def graph_model(nodes: Sequence[onnx.NodeProto], inits: Sequence[onnx.TensorProto],
                x_shape: Sequence[int], y_shape: Sequence[int], name: str = "synthetic"
                ) -> onnx.ModelProto:
    """A checked opset-17 model from ``x`` (batch, *x_shape) to ``y`` (batch, *y_shape)."""
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        nodes, name,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", *x_shape])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", *y_shape])],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return model

