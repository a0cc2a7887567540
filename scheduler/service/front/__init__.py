"""What the light commands (``submit``, ``jobs``, ``cancel``, ``learned``, ``logs``, ``state check``, ``token``) do
with a state directory (:mod:`.client`), how they reach its server (:mod:`.remote`: the Unix socket next to it, or
``--server URL`` with a token) and what they show of it (:mod:`.views`), without torch, numpy or the ILP."""
