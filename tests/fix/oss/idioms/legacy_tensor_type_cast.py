"""x.type(torch.cuda.FloatTensor), the legacy way to move a tensor to the GPU as float32."""
import json

import torch

x = torch.ones(2).type(torch.cuda.FloatTensor)
assert x.dtype == torch.float32
print("RESULT " + json.dumps({"ran": True}))
