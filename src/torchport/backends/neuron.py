"""AWS Trainium / Inferentia through TorchNeuron (torch-neuronx >= 2.13, a PrivateUse1 device)."""

from __future__ import annotations

from torchport.backends import register
from torchport.backends.base import Backend, Probe, package_installed


@register
class NeuronBackend(Backend):
    name = "neuron"
    aliases = ("trainium", "inferentia", "trn", "inf", "aws-neuron")
    description = "AWS Trainium / Inferentia NeuronCores through TorchNeuron"

    def probe(self) -> Probe:
        if not package_installed("torch_neuronx"):
            return Probe(
                False,
                "torch_neuronx is not installed",
                "Install torch-neuronx (Neuron SDK 2.33+, on a Trn2/Trn3 instance), or rehearse with "
                "--device neuron-emulated.",
            )
        import importlib

        import torch

        try:
            importlib.import_module("torch_neuronx")  # registers the 'neuron' device and torch.neuron
        except Exception as error:  # a broken install must not break probing
            return Probe(False, f"torch_neuronx failed to import: {error}", "Reinstall torch-neuronx.")
        if not hasattr(torch, "neuron"):
            return Probe(
                False,
                "torch_neuronx is installed but no 'neuron' device is registered (an XLA-based "
                "torch-neuronx older than TorchNeuron?)",
                "Upgrade to torch-neuronx 2.13+ for the native device, or use --device xla.",
            )
        return Probe(True, "TorchNeuron device registered")

