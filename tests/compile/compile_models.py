"""Tiny models for the compile tests: kept small so Dynamo and Inductor compile them in seconds."""

import torch
import torch.nn.functional as F


class TinyAttention(torch.nn.Module):
    """Embedding, one self-attention layer, a head. Causal: a position sees only earlier ones, so
    padding at the end cannot reach real positions; not causal: every position sees the padding."""

    def __init__(self, vocab: int = 32, width: int = 16, causal: bool = True):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, width)
        self.qkv = torch.nn.Linear(width, 3 * width)
        self.norm = torch.nn.LayerNorm(width)
        self.head = torch.nn.Linear(width, vocab)
        self.causal = causal

    def forward(self, ids, mask=None):
        x = self.embed(ids)
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        attn_mask = None if mask is None else mask[:, None, :].bool()
        x = x + F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=self.causal and mask is None)
        return self.head(self.norm(x))


class MeanPool(torch.nn.Module):
    """Averages over the sequence: padding changes every output."""

    def __init__(self, vocab: int = 32, width: int = 8):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, width)
        self.head = torch.nn.Linear(width, 2)

    def forward(self, ids):
        return self.head(self.embed(ids).mean(dim=1))


class KeepsPositive(torch.nn.Module):
    """Uses aten::nonzero (data-dependent shape), which the neuron profile marks unsupported."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)

    def forward(self, x):
        y = self.linear(x).relu()
        rows = torch.nonzero(y.sum(-1) > 0).squeeze(-1)
        return y[rows].sum(0) * 2 + 1
