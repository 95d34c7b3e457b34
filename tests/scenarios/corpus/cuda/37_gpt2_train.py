"""transformers GPT-2 built from a tiny config (no download), moved to 'cuda' and trained a few steps."""
# corpus: plain=fails
import json

import torch
from transformers import GPT2Config, GPT2LMHeadModel

torch.manual_seed(37)
device = torch.device("cuda")
config = GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=128, n_positions=64,
                    resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
model = GPT2LMHeadModel(config).to(device)
model.train()
optimizer = torch.optim.AdamW(model.parameters(), lr=5e-4)
input_ids = torch.randint(0, 128, (4, 24)).to(device)
attention_mask = torch.ones_like(input_ids)
losses = []
for step in range(4):
    out = model(input_ids=input_ids, attention_mask=attention_mask, labels=input_ids)
    out.loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad()
    losses.append(out.loss.item())
model.eval()
with torch.no_grad():
    logits = model(input_ids[:1, :8].cuda()).logits
print("RESULT " + json.dumps({"losses": losses, "next": logits[0, -1].argmax().item(),
                              "logit_sum": logits.sum().item()}))
