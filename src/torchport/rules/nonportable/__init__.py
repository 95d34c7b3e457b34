"""Code that cannot be ported mechanically: CUDA-only libraries, kernels and extensions."""
