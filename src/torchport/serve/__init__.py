"""Failover inference: a model on a new device with a live way back to the old one.

    from torchport.serve import Deployment
    deployment = Deployment("mymodels:make_model", primary="neuron", fallback="cpu", timeout_s=2, shadow=0.05)
    answer = deployment.predict({"inputs": [[0.1, 0.2, 0.3]]})
    answer.body, answer.device, answer.failover

`torchport serve ENTRY` puts it behind HTTP (`torchport.serve.server`, extra `torchport[serve]`).
"""

from torchport.serve.breaker import CLOSED, HALF_OPEN, OPEN, CircuitBreaker
from torchport.serve.errors import (Draining, InvalidInput, ModelRejectedInput, NoDeviceAnswered, Overloaded,
                                    PayloadTooLarge, PostprocessFailed, PreprocessFailed, ServeError,
                                    UnserializableOutput)
from torchport.serve.model import load_weights
from torchport.serve.runtime import FAILURE_CAUSES, Answer, Deployment
from torchport.serve.shadow import ShadowMonitor, compare_outputs

__all__ = [
    "Deployment", "Answer", "FAILURE_CAUSES", "CircuitBreaker", "CLOSED", "OPEN", "HALF_OPEN", "ShadowMonitor",
    "compare_outputs", "load_weights", "ServeError", "InvalidInput", "PayloadTooLarge", "ModelRejectedInput",
    "Overloaded", "Draining", "NoDeviceAnswered", "PreprocessFailed", "PostprocessFailed", "UnserializableOutput",
]
