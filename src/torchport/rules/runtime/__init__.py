"""Rules about torch.cuda runtime calls: sync, memory, streams, events, amp, backend flags."""
