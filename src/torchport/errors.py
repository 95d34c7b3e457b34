"""The one exception hierarchy of torchport.

Every message says what failed, the offending value, what is allowed, and the next step.
"""

from __future__ import annotations

__all__ = [
    "TorchportError",
    "UsageError",
    "UnknownDeviceError",
    "DeviceUnavailableError",
    "ConfigConflictError",
    "UnsupportedCudaFeature",
    "StrictModeError",
    "ProfileError",
    "EmulatedDeviceError",
    "DeviceSetupError",
]


class TorchportError(Exception):
    """Base class of every error torchport raises on purpose."""

    exit_code = 2


class UsageError(TorchportError):
    """Bad input from the user: a flag, a path, a value."""


class UnknownDeviceError(UsageError):
    """A device name that no backend or alias answers to."""

    def __init__(self, name: str, valid: list[str]):
        self.name = name
        self.valid = valid
        super().__init__(
            f"Unknown device {name!r}. Valid names: {', '.join(valid)}. "
            "Run 'torchport doctor' to see which are usable on this machine."
        )


class DeviceUnavailableError(UsageError):
    """A known backend that cannot be used on this machine."""

    def __init__(self, name: str, reason: str, how_to_enable: str, usable: list[str]):
        self.name = name
        self.reason = reason
        super().__init__(
            f"Backend {name!r} is not available: {reason}. Usable here: {usable}. "
            f"{how_to_enable}"
        )


class ConfigConflictError(UsageError):
    """A command-line flag and an environment variable disagree."""

    def __init__(self, flag: str, flag_value: str, env: str, env_value: str):
        super().__init__(
            f"{flag} {flag_value!r} conflicts with {env}={env_value!r}. "
            f"Pass only one of them, or make them agree."
        )


class UnsupportedCudaFeature(TorchportError, NotImplementedError):
    """A CUDA-only feature that cannot be redirected to the target device."""

    def __init__(self, feature: str, site: str, target: str, alternative: str):
        self.feature = feature
        self.site = site
        self.alternative = alternative
        super().__init__(
            f"{feature} at {site} is CUDA-only and cannot run on {target!r}. {alternative}."
        )


class StrictModeError(TorchportError):
    """Raised under --strict for anything that would otherwise be a silent no-op."""

    def __init__(self, what: str, site: str, target: str):
        self.what = what
        self.site = site
        super().__init__(
            f"{what} at {site} has no effect on {target!r} and --strict is set. "
            "Remove the call, guard it with torch.accelerator, or run without --strict."
        )


class ProfileError(UsageError):
    """A target profile that does not exist or does not satisfy the profile schema."""


class EmulatedDeviceError(TorchportError, RuntimeError):
    """The emulated target refused an operation the real target would refuse."""


class DeviceSetupError(TorchportError):
    """A device that came up too late, or in a state, that the work asked of it cannot use."""
