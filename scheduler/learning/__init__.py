"""What a scheduler learns online from the jobs it runs (throughputs per configuration, pair ratios)."""
