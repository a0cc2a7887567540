"""The server's API: every user operation on a state directory (submit, cancel, jobs, learned, logs, state check,
tokens) goes through the running ``colocate serve``, which alone opens ``state.db``.

* :mod:`.identity` — who calls: the kernel's peer credentials on the Unix socket, a token's user over HTTP; roles;
* :mod:`.tokens` — bearer tokens for other machines: shown once, stored as salted scrypt hashes, expiring,
  revocable;
* :mod:`.operations` — what each call does, with its authorization, run on the round loop's thread between
  rounds (one writer of ``state.db``);
* :mod:`.web` — the aiohttp application in its own thread: Unix socket and HTTP(S), limits on body size, JSON
  depth, request time and rate per caller; refusals counted and logged;
* the command side is :mod:`scheduler.service.front.remote` (standard library only): the Unix socket next to the
  state directory, or ``--server URL`` with a token. Its knobs are ``ApiConfig`` in
  :mod:`scheduler.service.config`.
"""
