"""Rules about torch.distributed set-up tied to NCCL and CUDA device ids."""
