"""A small GPT (nanoGPT-style), written the way CUDA projects write it."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head, block_size):
        super().__init__()
        self.n_head = n_head
        self.qkv = nn.Linear(n_embd, 3 * n_embd)
        self.proj = nn.Linear(n_embd, n_embd)

    def forward(self, x):
        batch, time, channels = x.size()
        q, k, v = self.qkv(x).split(channels, dim=2)
        q = q.view(batch, time, self.n_head, channels // self.n_head).transpose(1, 2)
        k = k.view(batch, time, self.n_head, channels // self.n_head).transpose(1, 2)
        v = v.view(batch, time, self.n_head, channels // self.n_head).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).contiguous().view(batch, time, channels))


class Block(nn.Module):
    def __init__(self, n_embd, n_head, block_size):
        super().__init__()
        self.ln1 = nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head, block_size)
        self.ln2 = nn.LayerNorm(n_embd)
        self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.GELU(), nn.Linear(4 * n_embd, n_embd))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab_size=256, block_size=64, n_layer=4, n_head=4, n_embd=128):
        super().__init__()
        self.block_size = block_size
        self.tok = nn.Embedding(vocab_size, n_embd)
        self.pos = nn.Embedding(block_size, n_embd)
        self.blocks = nn.ModuleList(Block(n_embd, n_head, block_size) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd)
        self.head = nn.Linear(n_embd, vocab_size, bias=False)
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.normal_(module.weight, std=0.02 / math.sqrt(n_layer))

    def forward(self, idx, targets=None):
        positions = torch.arange(idx.size(1), device=idx.device)
        x = self.tok(idx) + self.pos(positions)
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln_f(x))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        return logits, loss


def synthetic_corpus(length=20000, vocab_size=256, seed=1234):
    """Deterministic token stream with structure a small model can learn."""
    generator = torch.Generator().manual_seed(seed)
    base = torch.randint(0, vocab_size, (64,), generator=generator)
    repeats = base.repeat(length // 64 + 1)[:length]
    noise = torch.randint(0, vocab_size, (length,), generator=generator)
    mask = torch.rand(length, generator=generator) < 0.1
    return torch.where(mask, noise, repeats)
