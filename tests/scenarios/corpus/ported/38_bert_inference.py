"""Tiny-config BERT inference, hand-ported to CPU (CPU fp16 autocast)."""
import argparse
import json

import torch
from transformers import BertConfig, BertForSequenceClassification


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch-size", type=int, default=3)
    args = parser.parse_args()

    torch.manual_seed(38)
    config = BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=32, num_labels=3)
    model = BertForSequenceClassification(config)
    model.to(args.device)
    model.eval()

    ids = torch.randint(1, 100, (args.batch_size, 10))
    mask = torch.ones_like(ids)
    mask[0, 7:] = 0
    batch = {"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids)}
    batch = {k: v.to(args.device) for k, v in batch.items()}
    with torch.inference_mode():
        logits = model(**batch).logits
        with torch.autocast("cpu", dtype=torch.float16):
            logits_fp16 = model(**batch).logits
    probs = logits.softmax(-1)
    print("RESULT " + json.dumps({"probs": probs.tolist(), "pred": probs.argmax(-1).tolist(),
                                  "fp16": logits_fp16.float().flatten().tolist(),
                                  "inference": logits.is_inference()}))


if __name__ == "__main__":
    main()
