"""torch.cuda.reset_max_memory_allocated() (the deprecated alias the PyTorch AMP recipe's start_timer calls)."""
import json

import torch

torch.cuda.reset_max_memory_allocated()
print("RESULT " + json.dumps({"ran": True}))
