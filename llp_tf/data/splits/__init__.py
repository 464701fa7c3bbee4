"""Which examples a run labels, uses and leaves out."""
