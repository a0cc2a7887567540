"""Reports of comparison runs: :mod:`.comparison` (the markdown table and plots), :mod:`.load` (JCT across load)
and :mod:`.figures` (headless matplotlib helpers)."""
