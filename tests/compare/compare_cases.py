"""Entry points for `torchport compare` in the CLI tests: each returns (model, inputs) or a case dict."""

import torch

import compare_models as models


def agreeing():
    torch.manual_seed(0)
    return models.agreeing_model(), models.stack_inputs


def perturbed():
    return {"model": models.perturbed_model(), "inputs": models.stack_inputs(2), "name": "perturbed stack"}


def speech():
    return {"model": models.small_speech_encoder(), "inputs": models.speech_inputs,
            "unit": "audio_seconds", "units_per_sample": models.AUDIO_SECONDS}


def fused_speech():
    """Conv1d + nn.TransformerEncoder in eval mode: the fused encoder path, 12.5 ms of audio per sample."""
    return {"model": models.SpeechEncoder(), "inputs": models.speech_audio, "unit": "audio_seconds",
            "units_per_sample": 200 / 16000}


def gpt_training():
    return {"model": models.small_gpt(), "inputs": models.gpt_batch(0), "training_step": models.gpt_training_step,
            "batch_factory": models.gpt_batch}


def not_a_model():
    return "model", None


def broken():
    raise RuntimeError("weights file missing")
