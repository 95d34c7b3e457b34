"""Inference with generate(): a tiny-config T5 on torch.device('cuda'), greedy decoding, inference_mode."""
# corpus: plain=fails
import json

import torch
from transformers import T5Config, T5ForConditionalGeneration

torch.manual_seed(39)
DEVICE = torch.device("cuda")
config = T5Config(vocab_size=64, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2, num_heads=4,
                  decoder_start_token_id=0, pad_token_id=0, eos_token_id=1, dropout_rate=0.0)
model = T5ForConditionalGeneration(config).to(DEVICE).eval()
src = torch.randint(2, 64, (2, 9), device=DEVICE)
with torch.inference_mode():
    generated = model.generate(input_ids=src, max_new_tokens=6, do_sample=False, num_beams=1)
    enc = model.get_encoder()(input_ids=src).last_hidden_state
print("RESULT " + json.dumps({"tokens": generated.cpu().tolist(), "enc": enc.sum().item()}))
