"""Executors: the mechanism that applies a scheduling decision (``colocate schedule --json``) for real.

The policy (:mod:`scheduler.ilp`, :mod:`scheduler.model.placement`) decides; this package only executes, with the
GPU group as the unit — one job alone on its GPUs, or a packed pair sharing them:

* :mod:`scheduler.executor.plan` reads and validates the allocation JSON into a :class:`LaunchPlan` of
  :class:`GpuGroup` values and resolves what each job runs (a model of the zoo or a user command);
* :mod:`scheduler.executor.local` starts the groups on this node (MPS per GPU when asked, logs and
  progress per job, clean teardown);
* :mod:`scheduler.executor.ray.backend` runs one whole-GPU Ray task per group on a node of its GPU type;
* :mod:`scheduler.executor.slurm.emit` and :mod:`scheduler.executor.k8s` write sbatch scripts and HAMi pod
  manifests instead of running anything;
* :mod:`scheduler.executor.train` is the training process every built-in job runs (checkpoint-restore);
* :mod:`scheduler.executor.base` is the executor protocol (run a plan to its end for ``launch``; start,
  poll, stop and release detached groups for ``serve``), :mod:`scheduler.executor.registry` the executors
  by name (``local``: :mod:`.local`, ``ray``: :mod:`.ray.backend`), and
  :mod:`scheduler.executor.supervise` the per-group supervisor process that lets groups outlive the server, and
  :mod:`scheduler.executor.group_doc` the document it runs (``GroupDoc``: the one reader and writer of its JSON).
"""
