"""The plain loop, data-parallel: run under torchrun, one process per GPU (gloo on the CPU).

The library starts the process group and wraps the model in DDP; each replica trains on its share of the
global batch (`run.local_batch`), every replica stops at the same step, and rank 0 writes progress and the
checkpoint (which loads at any number of replicas).
"""

import os

import torch
from sklearn.datasets import load_digits

from colocate import job

torch.set_num_threads(1)
digits = load_digits()
x = torch.tensor(digits.data, dtype=torch.float32) / 16.0
y = torch.tensor(digits.target)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
optimizer = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)
loss_fn = torch.nn.CrossEntropyLoss()

with job.attach(model, optimizer, batch_size=32) as run:
    while run.running():
        idx = run.batch_indices(len(x))  # this replica's share of the step's global batch
        run.backward(lambda xb, yb: loss_fn(run.model(xb), yb), x[idx], y[idx])
        run.step()
if run.world_size > 1:
    os._exit(0)  # saved and reported: leave without gloo's finalizers (a rank can hang in them)
