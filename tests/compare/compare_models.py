"""Small models for the compare tests: one that agrees, one with an fp64 buffer, one with a layer
perturbed on the target side, a small GPT and a small speech encoder built from configs."""

from __future__ import annotations

import torch
from torch import nn

from torchport.compare import current_side


class Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.linear = nn.Linear(width, width)
        self.norm = nn.LayerNorm(width)

    def forward(self, x):
        return self.norm(torch.relu(self.linear(x)) + x)


class Offset(nn.Module):
    """Adds and removes a large offset held in float64: exact in fp64, lossy once downcast to fp32."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("offset", torch.tensor(1.0e9, dtype=torch.float64))

    def forward(self, x):
        shifted = x.to(self.offset.dtype) + self.offset
        return (shifted - self.offset).to(x.dtype)


class Perturbed(nn.Module):
    """Identity on the reference side; adds a visible error on the target side."""

    def forward(self, x):
        if current_side() == "target":
            return x + 0.05 * torch.ones_like(x)
        return x


class Stack(nn.Module):
    def __init__(self, width: int = 32, middle: nn.Module | None = None) -> None:
        super().__init__()
        self.embed = nn.Linear(16, width)
        self.first = Block(width)
        self.middle = middle if middle is not None else nn.Identity()
        self.second = Block(width)
        self.head = nn.Linear(width, 8)

    def forward(self, x):
        return self.head(self.second(self.middle(self.first(self.embed(x)))))


def agreeing_model() -> nn.Module:
    return Stack()


def fp64_model() -> nn.Module:
    return Stack(middle=Offset())


def perturbed_model() -> nn.Module:
    return Stack(middle=Perturbed())


def stack_inputs(batch_size: int):
    return (torch.randn(batch_size, 16),)


def small_gpt():
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(vocab_size=128, n_positions=32, n_embd=32, n_layer=2, n_head=2,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    return GPT2LMHeadModel(config)


def gpt_batch(step: int):
    tokens = torch.randint(0, 128, (2, 16))
    return {"input_ids": tokens, "labels": tokens}


def gpt_training_step(model, batch):
    return model(**batch).loss


SAMPLE_RATE = 16000
AUDIO_SECONDS = 0.25


def small_speech_encoder():
    from transformers import Wav2Vec2Config, Wav2Vec2Model

    config = Wav2Vec2Config(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
        conv_dim=(16, 16, 16), conv_stride=(5, 4, 4), conv_kernel=(10, 4, 4),
        num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=2,
        hidden_dropout=0.0, attention_dropout=0.0, activation_dropout=0.0, feat_proj_dropout=0.0,
        layerdrop=0.0, mask_time_prob=0.0, do_stable_layer_norm=True, feat_extract_norm="layer",
    )
    return Wav2Vec2Model(config)


def speech_inputs(batch_size: int):
    return (torch.randn(batch_size, int(SAMPLE_RATE * AUDIO_SECONDS)),)


FEATURES = 16


class SpeechEncoder(nn.Module):
    """Conv1d feature extractor + nn.TransformerEncoder: the fused fast path runs in eval mode."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Conv1d(1, FEATURES, kernel_size=10, stride=5)
        layer = nn.TransformerEncoderLayer(FEATURES, 2, 32, dropout=0.1, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2)
        self.head = nn.Linear(FEATURES, 8)

    def forward(self, audio):
        frames = self.features(audio.unsqueeze(1)).transpose(1, 2)
        return self.head(self.encoder(frames))


def speech_audio(batch_size):
    return (torch.randn(batch_size, 200),)
