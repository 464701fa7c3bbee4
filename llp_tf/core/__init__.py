"""The core of LLP: the memory bank, label propagation, the losses and the label encoding."""
