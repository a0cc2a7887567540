"""A plain PyTorch loop on the job library: an MLP on scikit-learn's digits.

Under `colocate serve` it resumes from its checkpoint at whatever batch size it is given, stops at its target or
on SIGTERM, reports progress and the gradient noise, and scales its learning rate to the batch.
"""

import torch
from sklearn.datasets import load_digits

from colocate import job

digits = load_digits()
x = torch.tensor(digits.data, dtype=torch.float32) / 16.0
y = torch.tensor(digits.target)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
optimizer = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)  # tuned for the first run's batch
loss_fn = torch.nn.CrossEntropyLoss()

with job.attach(model, optimizer, batch_size=32) as run:  # the batch serve gives wins over the default 32
    while run.running():
        idx = run.batch_indices(len(x))  # the next samples of a seeded stream of epochs
        run.backward(lambda xb, yb: loss_fn(run.model(xb), yb), x[idx], y[idx])
        run.step()
        if run.step_count % 50 == 0:
            with torch.no_grad():
                run.report(accuracy=float((model(x).argmax(1) == y).float().mean()))
