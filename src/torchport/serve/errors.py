"""The errors a deployment answers a request with, each carrying its HTTP status.

They belong to torchport's one hierarchy (`torchport.errors.TorchportError`); the server turns
each into a JSON body `{"error": KIND, "detail": MESSAGE}` with `status`, never a traceback.
"""

from __future__ import annotations

from torchport.errors import TorchportError, UsageError

__all__ = ["ServeError", "InvalidInput", "PayloadTooLarge", "Overloaded", "Draining", "NoDeviceAnswered",
           "ModelRejectedInput", "PreprocessFailed", "PostprocessFailed", "UnserializableOutput"]


class ServeError(TorchportError):
    """A request the deployment could not answer; `status` is its HTTP status, `kind` a stable name."""

    status = 500
    kind = "serve_error"


class InvalidInput(ServeError, UsageError):
    """The request body is not what the model's preprocess accepts."""

    status = 400
    kind = "invalid_input"


class PayloadTooLarge(ServeError, UsageError):
    """The request body is over the size limit."""

    status = 413
    kind = "payload_too_large"


class ModelRejectedInput(ServeError, UsageError):
    """The model raised on both devices for this input: the input, not a device, is at fault."""

    status = 422
    kind = "model_rejected_input"


class BodyTimeout(ServeError, UsageError):
    """The request body did not arrive in full within the server's body timeout (a stalled client)."""

    status = 408
    kind = "body_timeout"


class ClientDisconnected(ServeError):
    """The client went away before its request body arrived: nobody reads the answer (nginx's 499)."""

    status = 499
    kind = "client_disconnected"


class Overloaded(ServeError):
    """More requests in flight and queued than the concurrency limit allows."""

    status = 429
    kind = "overloaded"


class Draining(ServeError):
    """The deployment is shutting down: in-flight requests finish, new ones are refused."""

    status = 503
    kind = "draining"


class NoDeviceAnswered(ServeError):
    """No device could answer: the primary failed and so did the fallback (timeout, out of memory, NaN)."""

    status = 503
    kind = "no_device_answered"


class PreprocessFailed(ServeError):
    """The factory's preprocess failed in a way that is not about the request (a missing vocabulary
    file, a typo in its code): the server is at fault, not the client."""

    status = 500
    kind = "preprocess_error"


class PostprocessFailed(ServeError):
    """The factory's postprocess raised on the outputs of every device that answered."""

    status = 500
    kind = "postprocess_error"


class UnserializableOutput(ServeError):
    """The postprocessed answer is not JSON (an object, NaN, a tensor left in it); `reason` says why."""

    status = 500
    kind = "unserializable_output"

    def __init__(self, message: str, reason: str = ""):
        super().__init__(message)
        self.reason = reason
