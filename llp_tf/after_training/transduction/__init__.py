"""The label propagation methods of the paper's Table 5 and their sampling protocol."""
