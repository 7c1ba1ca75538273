"""The bundled models: plain stem → blocks → head stacks that export to simple ONNX graphs.

Each block is a residual unit whose output is one float tensor, so the zoo can cut the
exported graph between blocks. Imported only inside builders (imports torch).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn


class ResidualBlock2d(nn.Module):
    """Two 3×3 convolutions with BatchNorm and a (projected when needed) shortcut."""

    def __init__(self, in_channels: int, out_channels: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(out_channels)
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_channels)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or in_channels != out_channels:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_channels, out_channels, 1, stride, bias=False),
                nn.BatchNorm2d(out_channels),
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return torch.relu(out + self.shortcut(x))


class ResNet2d(nn.Module):
    """A small ResNet: 3×3 stem, residual stages (channels, stride), global pool, linear head.

    ``stages`` lists ``(channels, stride)`` per residual block.
    """

    def __init__(
        self, in_channels: int, stem_channels: int, stages: Sequence[tuple[int, int]],
        num_classes: int,
    ) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(in_channels, stem_channels, 3, 1, 1, bias=False),
            nn.BatchNorm2d(stem_channels),
            nn.ReLU(),
        )
        blocks = []
        channels = stem_channels
        for out_channels, stride in stages:
            blocks.append(ResidualBlock2d(channels, out_channels, stride))
            channels = out_channels
        self.blocks = nn.Sequential(*blocks)
        self.head = nn.Sequential(
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(channels, num_classes)
        )

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(self.stem(image)))


class ResidualBlock1d(nn.Module):
    """Two 1-D convolutions (kernel ``k``) with BatchNorm and an identity shortcut."""

    def __init__(self, channels: int, kernel_size: int, dilation: int = 1) -> None:
        super().__init__()
        padding = dilation * (kernel_size - 1) // 2
        self.conv1 = nn.Conv1d(channels, channels, kernel_size, padding=padding,
                               dilation=dilation, bias=False)
        self.bn1 = nn.BatchNorm1d(channels)
        self.conv2 = nn.Conv1d(channels, channels, kernel_size, padding=padding,
                               dilation=dilation, bias=False)
        self.bn2 = nn.BatchNorm1d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(x + self.bn2(self.conv2(out)))


class TransformerBlock(nn.Module):
    """A pre-norm transformer encoder layer written out in plain ops (exports cleanly)."""

    def __init__(self, dim: int, heads: int, mlp_ratio: int = 2, dropout: float = 0.1) -> None:
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(
            nn.Linear(dim, mlp_ratio * dim), nn.GELU(), nn.Linear(mlp_ratio * dim, dim)
        )
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, tokens, dim = x.shape
        head_dim = dim // self.heads
        qkv = self.qkv(self.norm1(x)).reshape(batch, tokens, 3, self.heads, head_dim)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        attention = torch.softmax(q @ k.transpose(-2, -1) * head_dim**-0.5, dim=-1)
        mixed = (attention @ v).transpose(1, 2).reshape(batch, tokens, dim)
        x = x + self.dropout(self.proj(mixed))
        return x + self.dropout(self.mlp(self.norm2(x)))
