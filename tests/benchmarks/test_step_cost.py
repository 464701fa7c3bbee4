"""Step cost: FLOPs from the profiler, bytes from XLA's optimised program."""

import tensorflow as tf

import step_cost  # benchmarks/ is on the import path (conftest.py)

B, D, N = 8, 16, 64


def _matmul_and_gradient(x, w):
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = tf.matmul(x, w)
    return y, tape.gradient(y, x)


def test_flops_of_a_matmul_and_its_input_gradient():
    x, w = tf.ones([B, D]), tf.ones([D, N])
    # Forward [B, D] x [D, N] and backward [B, N] x [N, D]: 2 B D N each.
    assert step_cost.step_flops(_matmul_and_gradient, x, w) == 2 * (2 * B * D * N)


def test_bytes_of_one_fused_elementwise_pass():
    x = tf.ones([B, N])
    # x * 2 + 1 is one fusion: read B*N float32, write B*N float32.
    assert step_cost.step_bytes(lambda v: v * 2.0 + 1.0, x) == 2 * B * N * 4


def test_hlo_bytes_counts_operands_and_results_of_entry_instructions():
    hlo = """HloModule m

%fused (p: f32[4,8]) -> f32[4,8] {
  %p = f32[4,8]{1,0} parameter(0)
  ROOT %m = f32[4,8]{1,0} multiply(f32[4,8]{1,0} %p, f32[4,8]{1,0} %p)
}

ENTRY %main (a: f32[4,8], b: bf16[8,2]) -> (f32[4,8], f32[4,2]) {
  %a = f32[4,8]{1,0} parameter(0)
  %b = bf16[8,2]{1,0} parameter(1)
  %f = f32[4,8]{1,0} fusion(f32[4,8]{1,0} %a), kind=kLoop, calls=%fused
  %c = f32[8,2]{1,0} convert(bf16[8,2]{1,0} %b)
  %d = f32[4,2]{1,0} dot(f32[4,8]{1,0} %f, f32[8,2]{1,0} %c), lhs_contracting_dims={1}
  ROOT %t = (f32[4,8]{1,0}, f32[4,2]{1,0}) tuple(%f, %d)
}
"""
    fusion = 2 * 32 * 4  # reads a, writes f
    convert = 16 * 2 + 16 * 4
    dot = 32 * 4 + 16 * 4 + 8 * 4
    assert step_cost.hlo_bytes(hlo) == fusion + convert + dot
    assert step_cost.shape_bytes("(f32[4,8]{1,0}, pred[3])") == 32 * 4 + 3
