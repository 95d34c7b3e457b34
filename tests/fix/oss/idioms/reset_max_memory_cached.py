"""torch.cuda.reset_max_memory_cached(), the older alias of reset_peak_memory_stats."""
import json

import torch

torch.cuda.reset_max_memory_cached()
print("RESULT " + json.dumps({"ran": True}))
