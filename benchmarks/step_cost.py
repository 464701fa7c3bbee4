"""What a training step costs: its floating-point operations and bytes moved.

For a performance model on machines without the target GPU
(bench_gpu_model.py). Both count a function of a batch, typically
`Method.forward_backward` of a phase (the part ``--jit_compile`` compiles):

- `step_flops`: TensorFlow's profiler over the traced graph, which counts
  each op with registered statistics (convolutions and their gradients,
  matmuls, element-wise arithmetic) from its static shapes;
- `step_bytes`: the function compiled by XLA, summing for every instruction
  of the optimised program's entry computation (each fusion, convolution,
  dot, copy, ...) the bytes of its operands and its result. After fusion
  these are the reads and writes of device memory; parameters, constants,
  tuples and bitcasts move nothing themselves. The figure is the backend's
  (here the CPU's) fusion, an estimate for another backend.
"""

import re
from typing import Any, Callable

import tensorflow as tf

_SHAPE = re.compile(r"\b(pred|s8|u8|s16|u16|s32|u32|s64|u64|bf16|f16|f32|f64)\[([\d,]*)\]")
_DTYPE_BYTES = {"pred": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "bf16": 2, "f16": 2,
                "s32": 4, "u32": 4, "f32": 4, "s64": 8, "u64": 8, "f64": 8}
_MOVE_NOTHING = {"parameter", "constant", "get-tuple-element", "tuple", "bitcast"}
_INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?%(\S+)\s*=\s*(.+?)\s([a-z][\w-]*)\((.*)$")


def shape_bytes(shape_text: str) -> int:
    """Bytes of the arrays in an HLO shape, e.g. ``f32[128,64]{1,0}`` or a tuple."""
    total = 0
    for dtype, dims in _SHAPE.findall(shape_text):
        count = 1
        for dim in filter(None, dims.split(",")):
            count *= int(dim)
        total += count * _DTYPE_BYTES[dtype]
    return total


def hlo_bytes(hlo_text: str) -> int:
    """Bytes read and written by the entry computation of an HLO module's text."""
    lines = hlo_text[hlo_text.index("\nENTRY"):].splitlines()[1:]
    sizes, total = {}, 0
    for line in lines:
        match = _INSTRUCTION.match(line)
        if not match:
            continue
        name, shape, opcode, rest = match.groups()
        sizes[name] = shape_bytes(shape)
        if opcode in _MOVE_NOTHING:
            continue
        operands = re.findall(r"%([\w.\-]+)", rest.split("), ")[0])
        total += sizes[name] + sum(sizes.get(operand, 0) for operand in operands)
    return total


def step_flops(fn: Callable[..., Any], *args: Any) -> int:
    """Floating-point operations of one call ``fn(*args)`` (static shapes)."""
    from tensorflow.python.profiler import model_analyzer, option_builder  # noqa: PLC0415
    from tensorflow.python.util import deprecation  # noqa: PLC0415

    graph = tf.function(fn).get_concrete_function(*args).graph
    options = (option_builder.ProfileOptionBuilder(
        option_builder.ProfileOptionBuilder.float_operation()).with_empty_output().build())
    with deprecation.silence():  # the profiler calls a TensorFlow 1 shape helper
        return int(model_analyzer.profile(graph, options=options).total_float_ops)


def step_bytes(fn: Callable[..., Any], *args: Any) -> int:
    """Bytes moved by one call ``fn(*args)`` compiled with XLA (see the module docstring)."""
    compiled = tf.function(fn, jit_compile=True)
    return hlo_bytes(compiled.experimental_get_compiler_ir(*args)(stage="optimized_hlo"))
