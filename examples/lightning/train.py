"""A LightningModule under colocate: `job.LightningCallback` keeps the contract."""

import lightning.pytorch as pl
import torch
from sklearn.datasets import load_digits

from colocate import job


class Digits(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.02, momentum=0.9)


digits = load_digits()
data = torch.utils.data.TensorDataset(torch.tensor(digits.data, dtype=torch.float32) / 16.0,
                                      torch.tensor(digits.target))
# micro-batches of at most 16: two batch sizes each step, so the gradient noise is measured
callback = job.LightningCallback(job.JobConfig(max_micro_batch=16))
loader = torch.utils.data.DataLoader(data, batch_size=callback.tracker.micro_batch, shuffle=True)
trainer = pl.Trainer(accelerator="auto", devices=1, max_epochs=1000, callbacks=[callback], logger=False,
                     accumulate_grad_batches=callback.tracker.accum_steps, enable_checkpointing=False,
                     enable_progress_bar=False, enable_model_summary=False)
torch.manual_seed(0)
trainer.fit(Digits(), loader, ckpt_path=callback.ckpt_path)
