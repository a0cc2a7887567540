"""The job file of ``colocate submit`` and its one validator, shared by the command and the server
(:mod:`.jobspec`), and the zoo's model names it checks against without importing torch (:mod:`.model_names`)."""
