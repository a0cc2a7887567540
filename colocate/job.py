"""The job library, public: ``from colocate import job`` (its code: :mod:`scheduler.jobkit`, where the built-in
trainer can import it too).

::

    from colocate import job

    with job.attach(model, optimizer) as run:
        while run.running():
            x, y = inputs[run.batch_indices(len(inputs))], ...
            run.backward(lambda xb, yb: loss_fn(run.model(xb), yb), x, y)
            run.step()
"""

from scheduler.jobkit import LR_SCALINGS, OOM_EXIT, GradientNoise, JobConfig, JobEnv, Run, attach, lr_factor, read_env

__all__ = ["LR_SCALINGS", "OOM_EXIT", "GradientNoise", "JobConfig", "JobEnv", "Run", "attach", "lr_factor",
           "read_env"]


def __getattr__(name: str) -> object:
    """The framework callbacks, imported on first use (their frameworks are the optional ``integrations``)."""
    if name == "LightningCallback":
        from scheduler.jobkit.lightning import ColocateCallback

        return ColocateCallback
    if name == "HuggingFaceCallback":
        from scheduler.jobkit.huggingface import HuggingFaceCallback

        return HuggingFaceCallback
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
