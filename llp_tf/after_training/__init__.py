"""After training: a run read back, and its export, linear probe, Table 5 comparison and analysis."""
