"""free, total = torch.cuda.mem_get_info(), used to size batches."""
import json

import torch

free, total = torch.cuda.mem_get_info()
print(free, total)
print("RESULT " + json.dumps({"ran": True}))
