"""print(torch.cuda.memory_summary()), a common end-of-training report."""
import json

import torch

print(torch.cuda.memory_summary())
print("RESULT " + json.dumps({"ran": True}))
