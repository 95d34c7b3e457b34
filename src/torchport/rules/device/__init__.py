"""Rules about where tensors live: device strings, torch.device, .cuda(), device queries."""
