"""Transformers' Trainer on tpu with default TrainingArguments and no
environment variables (torch_tpu's accelerate integration): losses step by
step equal to the CPU run (dropout off), gradient accumulation, the
evaluation loop, checkpoint save and resume, bf16=True, tied weights, and
Seq2SeqTrainer."""
import os

import pytest
import torch

from hf_util import T, needs_hf, no_fallback

pytestmark = needs_hf

VOCAB = 64


class _Data(torch.utils.data.Dataset):
    def __init__(self, n=16, length=10, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randint(1, VOCAB, (n, length), generator=g)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return {"input_ids": self.x[i], "labels": self.x[i]}


def _gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=VOCAB, n_positions=16, n_embd=32, n_layer=1, n_head=2, resid_pdrop=0.0,
                     embd_pdrop=0.0, attn_pdrop=0.0)
    return GPT2LMHeadModel(cfg)


def _train(tmp, use_cpu, resume=None, **kw):
    from transformers import Trainer, TrainingArguments

    args = dict(output_dir=str(tmp), per_device_train_batch_size=4, per_device_eval_batch_size=4, max_steps=4,
                logging_steps=1, report_to=[], seed=0, learning_rate=1e-3, use_cpu=use_cpu,
                save_strategy="steps", save_steps=2, eval_strategy="steps", eval_steps=4,
                gradient_accumulation_steps=2, disable_tqdm=True)
    args.update(kw)
    model = _gpt2()
    trainer = Trainer(model=model, args=TrainingArguments(**args), train_dataset=_Data(), eval_dataset=_Data(8, seed=1))
    trainer.train(resume_from_checkpoint=resume)
    hist = trainer.state.log_history
    losses = {h["step"]: h["loss"] for h in hist if "loss" in h}
    evals = [h["eval_loss"] for h in hist if "eval_loss" in h]
    return trainer, losses, evals


def test_trainer_defaults_pick_tpu_and_match_cpu_losses_with_accumulation_eval_and_resume(tmp_path):
    from accelerate import PartialState

    assert "ACCELERATE_TORCH_DEVICE" not in os.environ
    _, cpu_losses, cpu_evals = _train(tmp_path / "cpu", use_cpu=True)
    with no_fallback():
        trainer, losses, evals = _train(tmp_path / "tpu", use_cpu=False)
    assert trainer.args.device.type == "tpu" and PartialState().device.type == "tpu"
    model = trainer.model
    assert all(p.device.type == "tpu" for p in model.parameters())
    # GPT-2 ties lm_head to the input embedding: still one Parameter on tpu
    assert model.lm_head.weight is model.transformer.wte.weight
    assert sorted(losses) == [1, 2, 3, 4]
    for step in cpu_losses:
        assert losses[step] == pytest.approx(cpu_losses[step], rel=1e-4), (step, losses, cpu_losses)
    assert len(evals) == 1 and evals[0] == pytest.approx(cpu_evals[0], rel=1e-4)
    ckpt = tmp_path / "tpu" / "checkpoint-2"
    assert (ckpt / "model.safetensors").exists() and (ckpt / "optimizer.pt").exists()
    # resume from the step-2 checkpoint: steps 3 and 4 as in the uninterrupted run
    trainer2, resumed, _ = _train(tmp_path / "tpu", use_cpu=False, resume=str(ckpt), eval_strategy="no")
    assert trainer2.state.global_step == 4 and sorted(resumed) == [1, 2, 3, 4]  # 1, 2 from the checkpoint's state
    for step in (3, 4):
        assert resumed[step] == pytest.approx(losses[step], rel=1e-4), (resumed, losses)


def test_trainer_bf16_trains_on_tpu_under_autocast(tmp_path):
    kw = dict(bf16=True, save_strategy="no", eval_strategy="no", gradient_accumulation_steps=1)
    _, cpu_losses, _ = _train(tmp_path / "cpu", use_cpu=True, **kw)
    trainer, losses, _ = _train(tmp_path / "tpu", use_cpu=False, **kw)
    assert trainer.accelerator.mixed_precision == "bf16" and trainer.accelerator.native_amp
    assert next(trainer.model.parameters()).dtype == torch.float32  # weights stay fp32 under autocast
    for step in cpu_losses:  # bf16 matmuls: the two runs agree to bf16 precision
        assert losses[step] == pytest.approx(cpu_losses[step], rel=2e-2, abs=2e-2), (losses, cpu_losses)


def test_seq2seq_trainer_t5_trains_and_generates_in_eval(tmp_path):
    from transformers import (Seq2SeqTrainer, Seq2SeqTrainingArguments, T5Config,
                              T5ForConditionalGeneration)

    cfg = T5Config(vocab_size=VOCAB, d_model=16, d_kv=4, d_ff=32, num_layers=1, num_heads=2, dropout_rate=0.0,
                   decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)

    class Pairs(torch.utils.data.Dataset):
        def __init__(self, n):
            g = torch.Generator().manual_seed(n)
            self.x = torch.randint(2, VOCAB, (n, 6), generator=g)

        def __len__(self):
            return len(self.x)

        def __getitem__(self, i):
            return {"input_ids": self.x[i], "labels": self.x[i].flip(0)}

    def run(use_cpu, out):
        torch.manual_seed(0)
        args = Seq2SeqTrainingArguments(output_dir=str(out), per_device_train_batch_size=4,
                                        per_device_eval_batch_size=4, max_steps=3, logging_steps=1, report_to=[],
                                        seed=0, learning_rate=1e-3, use_cpu=use_cpu, save_strategy="no",
                                        predict_with_generate=True, generation_max_length=5, disable_tqdm=True)
        tr = Seq2SeqTrainer(model=T5ForConditionalGeneration(cfg), args=args, train_dataset=Pairs(12),
                            eval_dataset=Pairs(4))
        tr.train()
        pred = tr.predict(Pairs(4))
        return [h["loss"] for h in tr.state.log_history if "loss" in h], pred.predictions, tr

    cpu_losses, cpu_pred, _ = run(True, tmp_path / "cpu")
    losses, pred, tr = run(False, tmp_path / "tpu")
    assert tr.model.device.type == "tpu"
    assert losses == pytest.approx(cpu_losses, rel=1e-4)
    assert (pred == cpu_pred).all()
