"""Re-export of the project-wide input error so analysis and scheduler code import it from here."""

from profiler.errors import InputError

__all__ = ["InputError"]
