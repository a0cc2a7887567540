"""What every package of the project uses, and nothing else: the bottom layer (imports no project module).

* :mod:`.errors` — :class:`InputError` (bad user input, printed as one line) and :class:`SharingUnavailable`;
* :mod:`.names` — the one safe-name pattern for anything that reaches a file, path, script or manifest;
* :mod:`.bounds` — bounded numbers users give (finite, of the right kind, inside a documented range);
* :mod:`.safe_load` — UTF-8 text, YAML and JSON read with limits (size, depth, aliases, duplicate keys);
* :mod:`.files` — atomic file writes;
* :mod:`.signals` — signal handling for everything that owns child processes;
* :mod:`.contain` — a job and everything it starts contained and stopped together (cgroup, subreaper).
"""
