"""Automatic probes of never-measured job types on spare GPUs: the manager the server runs (:mod:`.manager`) and
the probe process, which runs the profiler's runner (:mod:`.run`); what each probe wrote is kept in the state
(:mod:`scheduler.service.state.probe_records`)."""
