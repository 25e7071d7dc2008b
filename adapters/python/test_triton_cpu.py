#!/usr/bin/env python3
"""Tests of triton_cpu.py (Triton's interpreter helped to run FLA's kernels on CPU tensors), in the
peers venv (torch, triton, flash-linear-attention; scripts/peers-check.sh runs it):

    python adapters/python/test_triton_cpu.py [-v] [-k PATTERN]      (standard library unittest)

Each patch is checked on a tiny kernel against NumPy, and the same kernels are run once more in
a child process under the bare interpreter, where they must come out wrong: a test that passes
there as well would not show the patch doing anything (and a Triton that fixed its interpreter).
Last, FLA's chunk_gated_delta_rule and fused_recurrent_gated_delta_rule on CPU tensors must
agree with FLA's own naive recurrence (fp32, bf16, packed with cu_seqlens).
"""
import json
import os
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
BARE = os.environ.get("TRITON_CPU_TEST_BARE") == "1"  # the child: interpreter without patches
if BARE:
    os.environ["TRITON_INTERPRET"] = "1"
else:
    import triton_cpu
    FACTS = triton_cpu.enable()

import numpy as np  # noqa: E402
import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402


# ---- tiny kernels ------------------------------------------------------------------------------

@triton.jit
def dot_kernel(a, b, c, N: tl.constexpr):
    o = tl.arange(0, N)
    x = tl.load(a + o[:, None] * N + o[None, :])
    y = tl.load(b + o[:, None] * N + o[None, :])
    tl.store(c + o[:, None] * N + o[None, :], tl.dot(x, y))


@triton.jit
def arith_kernel(x, y, out, N: tl.constexpr):
    o = tl.arange(0, N)
    a = tl.load(x + o)
    b = tl.load(y + o)
    tl.store(out + o, a * b + a)              # bf16 * and +
    tl.store(out + N + o, -a)                 # bf16 negation
    tl.store(out + 2 * N + o, tl.where(a < b, a, b))  # bf16 comparison
    tl.store(out + 3 * N + o, tl.maximum(a, b))
    tl.store(out + 4 * N + o, tl.fma(a, b, a))  # one rounding
    tl.store(out + 5 * N, tl.max(a, axis=0))  # a reduction on bf16


@triton.jit
def cast_kernel(x, out, N: tl.constexpr):
    o = tl.arange(0, N)
    tl.store(out + o, tl.load(x + o).to(tl.bfloat16))
    tl.store(out + N + o, tl.load(x + o).to(tl.bfloat16, fp_downcast_rounding="rtz"))


@triton.jit
def loop_kernel(out, n):
    acc = tl.zeros([1], dtype=tl.int64)
    for i in range(n):
        acc += i.to(tl.int64) * 2  # FLA's chunk_delta_h.py: i_t.to(tl.int64)
    for j in tl.range(0, 3):
        acc += j.to(tl.int64)
    for s in tl.static_range(2):
        acc += s  # a compile-time int in Triton, and here
    tl.store(out + tl.arange(0, 1), acc)


@triton.jit
def twice_plus_one(x):
    return x * 2 + 1


@triton.jit
def device_call_kernel(out):
    acc = tl.zeros([1], dtype=tl.int32)
    for _ in tl.static_range(4):
        acc = twice_plus_one(acc)
    tl.store(out + tl.arange(0, 1), acc)


@triton.jit
def inline_kernel(out):  # device_call_kernel without the device function
    acc = tl.zeros([1], dtype=tl.int32)
    for _ in tl.static_range(4):
        acc = acc * 2 + 1
    tl.store(out + tl.arange(0, 1), acc)


exp = tl.exp  # a module's own name for a builtin, as vLLM's vendored FLA (ops/op.py) binds it


@triton.jit
def alias_kernel(x, out, N: tl.constexpr):
    o = tl.arange(0, N)
    tl.store(out + o, exp(tl.load(x + o)))


@triton.autotune(configs=[triton.Config({"BLOCK": 4}), triton.Config({"BLOCK": 8})], key=["n"])
@triton.jit
def tuned_kernel(out, n, BLOCK: tl.constexpr):
    o = tl.arange(0, BLOCK)
    tl.store(out + o, tl.full([BLOCK], BLOCK, tl.int32), mask=o < n)


# ---- references --------------------------------------------------------------------------------

def bf16(x):
    """float32 values rounded to bf16 (torch rounds to nearest even), as float32."""
    return torch.as_tensor(np.asarray(x, np.float32)).to(torch.bfloat16).float().numpy()


def run_dot():
    rng = np.random.default_rng(1)
    a, b = (bf16(rng.standard_normal((16, 16))) for _ in range(2))
    c = torch.empty(16, 16)
    dot_kernel[(1,)](torch.tensor(a).bfloat16(), torch.tensor(b).bfloat16(), c, N=16)
    return float(np.abs(c.numpy() - a.astype(np.float64) @ b).max())


def run_arith():
    rng = np.random.default_rng(2)
    n = 16
    a, b = bf16(rng.standard_normal(n)), bf16(rng.standard_normal(n))
    out = torch.zeros(6 * n, dtype=torch.bfloat16)
    arith_kernel[(1,)](torch.tensor(a).bfloat16(), torch.tensor(b).bfloat16(), out, N=n)
    got = out.float().numpy()
    want = np.concatenate([bf16(bf16(a * b) + a), -a, np.where(a < b, a, b), np.maximum(a, b),
                           bf16(a.astype(np.float64) * b + a), [a.max()],
                           np.zeros(n - 1, np.float32)])
    return float(np.abs(got - want).max())


def run_cast():
    # Ties and near-ties at 1.0: fp32 -> bf16 keeps 7 mantissa bits; RNE rounds 1 + 2^-8 (a tie)
    # down to 1, 1 + 3 * 2^-8 (a tie) up to 1 + 2^-6, and 1 + 2^-8 + 2^-20 up.
    x = np.array([1 + 2.0 ** -8, 1 + 3 * 2.0 ** -8, 1 + 2.0 ** -8 + 2.0 ** -20, -3.14159265,
                  65504.7, 1e-39, np.inf, -np.inf], np.float32)
    out = torch.zeros(16, dtype=torch.bfloat16)
    cast_kernel[(1,)](torch.tensor(x), out, N=8)
    nearest = torch.tensor(x).bfloat16().view(torch.int16)
    toward_zero = torch.tensor(x.view(np.int32) >> 16).to(torch.int16)  # rounding="rtz"
    return int((out.view(torch.int16) != torch.cat([nearest, toward_zero])).sum())


def run_loop():
    out = torch.zeros(1, dtype=torch.int64)
    loop_kernel[(1,)](out, 5)
    return int(out[0])  # 2 * (0+1+2+3+4) + (0+1+2) + (0+1) = 24


def run_alias():
    x = torch.linspace(-3, 3, 8)
    out = torch.zeros(8)
    alias_kernel[(1,)](x, out, N=8)
    return float((out - torch.exp(x)).abs().max())


# ---- the tests ---------------------------------------------------------------------------------

@unittest.skipIf(BARE, "the child process")
class Patches(unittest.TestCase):

    def test_enable_reports_the_emulation(self):
        self.assertTrue(FACTS["interpreter"])
        self.assertIn("bf16", FACTS["emulation"])
        self.assertIs(triton_cpu.enable(), FACTS)  # idempotent

    def test_bf16_dot_accumulates_in_fp32(self):
        self.assertLess(run_dot(), 1e-4)

    def test_bf16_arithmetic_comparison_fma_and_reduction(self):
        self.assertEqual(run_arith(), 0.0)

    def test_fp32_to_bf16_rounds_to_nearest_even(self):
        self.assertEqual(run_cast(), 0)

    def test_bits_helpers_round_trip_and_round(self):
        x = np.array([1.0, -2.5, 1 + 2.0 ** -8, 1 + 3 * 2.0 ** -8, np.nan, -0.0], np.float32)
        bits = triton_cpu.f32_to_bf16_bits(x)
        want = torch.tensor(x).bfloat16().view(torch.int16).numpy().view(np.uint16)
        self.assertEqual(bits[:4].tolist(), want[:4].tolist())
        self.assertTrue(np.isnan(triton_cpu.bf16_bits_to_f32(bits[4])))
        self.assertEqual(bits[5], 0x8000)
        self.assertEqual(triton_cpu.bf16_bits_to_f32(bits[:2]).tolist(), [1.0, -2.5])

    def test_loop_variables_are_tensors(self):
        self.assertEqual(run_loop(), 24)

    def test_device_functions_reuse_the_kernels_language_patches(self):
        import triton.runtime.interpreter as interp
        out, inline = torch.zeros(1, dtype=torch.int32), torch.zeros(1, dtype=torch.int32)
        device_call_kernel[(1,)](out)  # first launches rewrite the kernels: not counted
        inline_kernel[(1,)](inline)
        patch_builtin, calls = interp._patch_builtin, []

        def counting(*args):
            calls.append(1)
            return patch_builtin(*args)
        interp._patch_builtin = counting
        try:
            device_call_kernel[(1,)](out)
            with_calls = len(calls)
            del calls[:]
            inline_kernel[(1,)](inline)
        finally:
            interp._patch_builtin = patch_builtin
        self.assertEqual((int(out[0]), int(inline[0])), (15, 15))
        # Four device calls patched nothing more than the same kernel without them.
        self.assertEqual(with_calls, len(calls))

    def test_module_aliases_of_builtins_run(self):
        self.assertLess(run_alias(), 1e-6)
        self.assertIs(exp, tl.exp)  # restored after the kernel

    def test_autotune_keeps_the_first_config(self):
        out = torch.zeros(8, dtype=torch.int32)
        tuned_kernel[(1,)](out, 8)
        self.assertEqual(out.tolist(), [4] * 4 + [0] * 4)
        self.assertEqual(tuned_kernel.best_config.kwargs, {"BLOCK": 4})


@unittest.skipIf(BARE, "the child process")
class BareInterpreter(unittest.TestCase):
    """The same kernels under Triton's interpreter without triton_cpu: each must go wrong, or
    the patch above is not what makes its test pass."""

    def test_each_patch_is_needed(self):
        env = dict(os.environ, TRITON_CPU_TEST_BARE="1")
        done = subprocess.run([sys.executable, __file__, "--bare"], env=env,
                              capture_output=True, text=True, timeout=600)
        self.assertEqual(done.returncode, 0, done.stderr[-2000:])
        bare = json.loads(done.stdout.strip().splitlines()[-1])
        # Wrong numbers or an exception (a string): either way not what the patched run gives.
        for what, ok in (("dot", 1e-4), ("arith", 0.0), ("cast", 0)):
            self.assertFalse(isinstance(bare[what], (int, float)) and bare[what] <= ok,
                             f"{what}: the bare interpreter got it right: {bare[what]}")
        self.assertIn("has no attribute 'to'", str(bare["loop"]))
        self.assertIn("active drivers", str(bare["autotune"]))
        self.assertIn("forget to add @triton.jit", str(bare["alias"]))


def bare_main():
    """In the child: each kernel under the bare interpreter; what came out, as JSON."""
    def attempt(f):
        try:
            return f()
        except Exception as e:  # the interpreter raises on the Python int and on autotuning
            return f"{type(e).__name__}: {e}"

    def tuned():
        tuned_kernel[(1,)](torch.zeros(8, dtype=torch.int32), 8)
        return "ran"
    print(json.dumps({"dot": attempt(run_dot), "arith": attempt(run_arith),
                      "cast": attempt(run_cast), "loop": attempt(run_loop),
                      "autotune": attempt(tuned), "alias": attempt(run_alias)}))
    return 0


@unittest.skipIf(BARE, "the child process")
class FlaKernels(unittest.TestCase):
    """FLA's Triton kernels on CPU tensors against FLA's naive recurrence (fp64 here)."""

    @classmethod
    def setUpClass(cls):
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from fla.ops.gated_delta_rule import (chunk_gated_delta_rule,
                                                  fused_recurrent_gated_delta_rule)
            from fla.ops.gated_delta_rule.naive import naive_recurrent_gated_delta_rule
        cls.kernels = {"chunk": chunk_gated_delta_rule,
                       "fused_recurrent": fused_recurrent_gated_delta_rule}
        cls.naive = staticmethod(naive_recurrent_gated_delta_rule)

    def inputs(self, lengths, H=2, K=32, V=32):
        g = torch.Generator().manual_seed(sum(lengths))
        T = sum(lengths)
        q, k = (torch.randn(1, T, H, K, generator=g) for _ in range(2))
        k = torch.nn.functional.normalize(k, dim=-1)
        v = torch.randn(1, T, H, V, generator=g)
        gate = -torch.rand(1, T, H, generator=g)
        beta = torch.rand(1, T, H, generator=g)
        h0 = torch.randn(len(lengths), H, K, V, generator=g)
        return q, k, v, gate, beta, h0

    def reference(self, lengths, q, k, v, gate, beta, h0):
        os_, hs, lo = [], [], 0
        for i, n in enumerate(lengths):
            sl = slice(lo, lo + n)
            o, h = self.naive(q=q[:, sl].double(), k=k[:, sl].double(), v=v[:, sl].double(),
                              g=gate[:, sl].double(), beta=beta[:, sl].double(),
                              scale=q.shape[-1] ** -0.5, initial_state=h0[i:i + 1].double(),
                              output_final_state=True)
            os_.append(o)
            hs.append(h)
            lo += n
        return torch.cat(os_, 1), torch.cat(hs, 0)

    def check(self, name, lengths, dtype, tol):
        q, k, v, gate, beta, h0 = self.inputs(lengths)
        cast = [x.to(dtype) for x in (q, k, v, beta)]
        q, k, v, beta = (x.float() for x in cast)  # the reference sees the rounded inputs
        cu = torch.tensor([0] + list(np.cumsum(lengths)), dtype=torch.int64)
        o, h = self.kernels[name](q=cast[0], k=cast[1], v=cast[2], g=gate, beta=cast[3],
                                  initial_state=h0, output_final_state=True,
                                  cu_seqlens=cu if len(lengths) > 1 else None)
        ro, rh = self.reference(lengths, q, k, v, gate, beta, h0)
        self.assertEqual(o.dtype, dtype)
        for got, want in ((o, ro), (h, rh)):
            rel = float((got.double() - want).norm() / want.norm())
            self.assertLess(rel, tol, f"{name} {dtype} {lengths}: rel_rms {rel:.2e}")

    def test_chunk_fp32_packed(self):
        self.check("chunk", [40, 0, 29], torch.float32, 1e-5)

    def test_chunk_bf16(self):
        self.check("chunk", [70], torch.bfloat16, 1e-2)

    def test_fused_recurrent_fp32_packed(self):
        self.check("fused_recurrent", [9, 0, 7], torch.float32, 1e-5)

    def test_fused_recurrent_bf16(self):
        self.check("fused_recurrent", [12], torch.bfloat16, 1e-2)


@unittest.skipIf(BARE, "the child process")
class Adapter(unittest.TestCase):
    """fla_gdr.py's Triton path: outputs a kernel allocates and never writes come back NaN."""

    def test_unwritten_outputs_are_nan(self):
        import fla_gdr

        class FakeCase:  # what run_kernel reads of a dc_protocol.Case
            inputs = {n: np.zeros((1, 4, 2, 8), np.float32) for n in ("q", "k", "v")}
            inputs.update(g=np.zeros((1, 4, 2), np.float32), beta=np.zeros((1, 4, 2), np.float32))
            dtypes = {n: "fp32" for n in inputs}
            outputs = {"o": ("fp32", (1, 4, 2, 8))}

            def param(self, key, default=None):
                return default

        def lazy_kernel(q, **_):  # allocates its output and writes none of it
            return torch.empty(1 << 16)[:q.numel()].view(q.shape), None
        try:
            out = fla_gdr.run_kernel(FakeCase(), lazy_kernel, "interpreter")
        finally:
            torch.utils.deterministic.fill_uninitialized_memory = False
            torch.use_deterministic_algorithms(False)
        self.assertTrue(bool(torch.isnan(out["o"]).all()))


if __name__ == "__main__":
    if "--bare" in sys.argv:
        sys.exit(bare_main())
    torch.set_num_threads(1)
    unittest.main()
