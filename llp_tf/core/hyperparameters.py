"""The paper's LLP hyperparameters (section 4): K voters, T density neighbours (the authors'
release used 50), temperature tau, bank momentum m; `DENSITY_CHUNK_SIZE`, ours, bounds a
density refresh's memory."""

K = 10
T = 25
TEMPERATURE = 0.07
BANK_MOMENTUM = 0.5
DENSITY_CHUNK_SIZE = 1024
