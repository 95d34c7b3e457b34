"""Resizing a device storage (what FSDP does with its flat parameters) is not emulated: one clear error."""

import pytest
import torch

from torchport.emulated.errors import NotEmulatedError


def test_resizing_a_device_storage_names_what_is_not_emulated_and_host_storages_still_resize(neuron_device):
    storage = torch.ones(4, device="emulated").untyped_storage()
    with pytest.raises(NotEmulatedError, match="FullyShardedDataParallel"):
        storage.resize_(0)
    host = torch.ones(4).untyped_storage()
    host.resize_(0)
    assert host.size() == 0
