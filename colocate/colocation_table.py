"""The colocation table file format; it lives in :mod:`scheduler.colocation_table` (the scheduler reads it).

Re-exported here so analysis code and user scripts can keep importing it from the analysis layer.
"""

from scheduler.colocation_table import (
    COLUMNS,
    MAX_RATIO,
    read_colocation_table,
    validate_colocation_table,
    write_colocation_table,
)

__all__ = ["COLUMNS", "MAX_RATIO", "read_colocation_table", "validate_colocation_table", "write_colocation_table"]
