"""After training: a run read back, SavedModel export, the linear probe, the propagation comparison (Table 5) and the embedding analysis."""
