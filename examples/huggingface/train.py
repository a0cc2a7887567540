"""The Hugging Face Trainer under colocate: a tiny GPT-2 built from a config (nothing downloaded) learns the
digits as sequences of 64 pixel tokens; `job.HuggingFaceCallback` keeps the contract."""

import torch
from sklearn.datasets import load_digits
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

from colocate import job

tokens = torch.tensor(load_digits().data, dtype=torch.long)  # pixel intensities 0..16: a vocabulary of 17
data = [{"input_ids": t, "labels": t} for t in tokens]
torch.manual_seed(0)
model = GPT2LMHeadModel(GPT2Config(vocab_size=17, n_positions=64, n_embd=32, n_layer=2, n_head=2,
                                   bos_token_id=0, eos_token_id=0))
callback = job.HuggingFaceCallback(job.JobConfig(max_micro_batch=16))
args = TrainingArguments(output_dir=callback.output_dir, per_device_train_batch_size=callback.tracker.micro_batch,
                         gradient_accumulation_steps=callback.tracker.accum_steps, learning_rate=1e-3,
                         max_grad_norm=0.0, num_train_epochs=1000, save_strategy="no", report_to=[],
                         disable_tqdm=True, logging_steps=10)
Trainer(model=model, args=args, train_dataset=data, callbacks=[callback]).train(
    resume_from_checkpoint=callback.resume_from)
