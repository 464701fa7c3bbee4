"""The paper's values of LLP's hyperparameters, the defaults of the core and the config.

Zhuang et al. 2019, section 4: K = 10 voting neighbours, T = 25 neighbours
in the local density (the authors' release used 50), tau = 0.07 in every
softmax over the bank, bank momentum m = 0.5. `DENSITY_CHUNK_SIZE` is ours:
query rows per chunk of a density refresh, which bounds its memory.
"""

K = 10
T = 25
TEMPERATURE = 0.07
BANK_MOMENTUM = 0.5
DENSITY_CHUNK_SIZE = 1024
