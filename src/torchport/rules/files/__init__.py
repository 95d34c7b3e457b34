"""Rules over non-Python files: CUDA sources, requirements, scripts and configs."""
