"""llp_tf: Local Label Propagation (Zhuang et al. 2019) in TensorFlow 2 / Keras.

The library never reads flags; entry points in `tools/` turn flags into one
frozen config and pass explicit arguments.
"""

__version__ = "0.1.0"
