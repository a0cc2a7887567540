"""What the light commands (``submit``, ``jobs``, ``cancel``, ``learned``, ``state check``) do with a state directory
(:mod:`.client`) and show of it (:mod:`.views`), without torch, numpy or the ILP."""
