"""Export of a trained run as a SavedModel, and the functions it serves."""
