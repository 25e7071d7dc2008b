"""Triton kernels on CPU tensors: Triton's interpreter (TRITON_INTERPRET=1), helped in-process so
that flash-linear-attention's (FLA) real Triton kernels run and compute what a GPU computes.

    import triton_cpu
    facts = triton_cpu.enable()        # before FLA (or any @triton.jit kernel) is imported
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule
    o, s = chunk_gated_delta_rule(q=q, k=k, v=v, ...)     # CPU tensors

Nothing of FLA or Triton is changed on disk; enable() replaces a few objects of Triton's
interpreter and autotuner modules at run time (triton 3.x, checked with 3.9.0):

  autotune   the autotuner benchmarks every config, which needs a GPU driver ("0 active
             drivers"): it keeps the first config left after pruning instead.
  loops      the interpreter runs a kernel's `for i in range(n)` / `tl.range` as Python's range,
             so `i` is a Python int and FLA's `i_t.to(tl.int64)` (chunk_delta_h.py) fails; as in
             compiled Triton, the loop variable becomes an int32 scalar tensor.
             `tl.static_range` keeps Python ints (compile-time constants in Triton too).
  bf16       the interpreter holds bf16 as its raw 16 bits (uint16) and computes on them as
             integers: `tl.dot`, arithmetic, negation, comparisons, fma and reductions on bf16
             are silently wrong, and fp32 -> bf16 truncates. Every such operation widens its bf16
             operands to fp32 (exact), computes, and rounds a bf16 result to nearest even, as a
             GPU's cvt.rn.bf16.f32 does; `tl.dot` on bf16 operands accumulates in fp32, as tensor
             cores do.
  speed      device functions called from a kernel reuse the kernel's patches of
             triton.language instead of patching it again at every call (the same objects).
  aliases    the interpreter patches the builtins of triton.language, not a module's own name
             for one: vLLM's vendored FLA binds `exp = tl.exp` in op.py (FLA wraps it in a
             @triton.jit function) and calls `exp(b_g)` in its kernels, which the bare
             interpreter answers with "Did you forget to add @triton.jit ?". Names in a kernel's
             (or device function's) globals that are Triton builtins get the same patch as
             tl.exp itself while it runs.

What stays different from a GPU (say so with every result: facts["emulation"]): fp32 `tl.dot`
is exact fp32 here, TF32 on an NVIDIA GPU by default; bf16 elementwise arithmetic rounds once
per operation from fp32; reductions run in NumPy's order.
"""
import ast
import os
import sys

EMULATION = ("Triton interpreter on CPU (TRITON_INTERPRET=1): bf16 operations widened to fp32 "
             "and rounded to nearest even, tl.dot in fp32 (a GPU uses tensor cores, TF32 for "
             "fp32 operands), autotuner keeps the first config")

_enabled = None


# ---- bf16 <-> fp32 on raw bits (the interpreter's bf16 storage is uint16) ----------------------

def bf16_bits_to_f32(bits):
    """uint16 bf16 bit patterns -> float32 values (exact)."""
    import numpy as np
    return (np.asarray(bits).astype(np.uint32) << np.uint32(16)).view(np.float32)


def f32_to_bf16_bits(x):
    """float32 (or wider) values -> uint16 bf16 bit patterns, rounded to nearest even; NaN stays
    NaN (quiet), infinities and signed zeros are kept."""
    import numpy as np
    bits = np.asarray(x, dtype=np.float32).view(np.uint32)
    rounded = (bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)
    nan = (bits & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
    quiet = (bits >> np.uint32(16)) | np.uint32(0x0040)
    return np.where(nan, quiet, rounded).astype(np.uint16)


# ---- enable() ----------------------------------------------------------------------------------

def enable():
    """Turns the interpreter on and applies the patches; returns facts about what runs
    (versions, the patches, the emulation note). Idempotent. Raises RuntimeError when a Triton
    kernel module was imported before without the interpreter (its kernels would not be
    interpreted)."""
    global _enabled
    if _enabled is not None:
        return _enabled
    early = sorted(m for m in sys.modules if m == "fla" or m.startswith("fla."))
    if early and os.environ.get("TRITON_INTERPRET") != "1":
        raise RuntimeError("triton_cpu.enable() must run before flash-linear-attention is "
                           f"imported (already imported: {', '.join(early[:3])})")
    os.environ["TRITON_INTERPRET"] = "1"
    import triton
    from triton import knobs
    if not knobs.runtime.interpret:
        raise RuntimeError("TRITON_INTERPRET=1 did not reach triton.knobs.runtime.interpret")
    import triton.runtime.interpreter as interp
    _patch_autotuner()
    _patch_loops(interp)
    _patch_bf16(interp)
    _reuse_language_patches(interp)
    _patch_aliases(interp)
    _enabled = {"triton": triton.__version__, "interpreter": True,
                "patches": ["autotune: first config", "loops: int32 tensor loop variables",
                            "bf16: fp32 arithmetic, round to nearest even",
                            "speed: device functions reuse the kernel's language patches",
                            "aliases: module-level names for Triton builtins (exp = tl.exp)"],
                "emulation": EMULATION}
    return _enabled


def _patch_autotuner():
    from triton.runtime.autotuner import Autotuner
    original = Autotuner.prune_configs

    def prune_configs(self, kwargs):
        # One config left: Autotuner.run takes it without benchmarking (no GPU driver needed).
        return original(self, kwargs)[:1]

    Autotuner.prune_configs = prune_configs


def _patch_loops(interp):
    def loop_variable(values):
        for i in values:
            yield interp._implicit_cvt(i) if isinstance(i, int) else i

    class LoopTransformer(interp.ASTTransformer):
        """`for x in range(...)` / `for x in tl.range(...)` -> `for x in
        _triton_cpu_loop(range(...))`; static_range loops are left alone."""

        def visit_For(self, node):
            node = self.generic_visit(node)
            it = node.iter
            name = (it.func.id if isinstance(it, ast.Call) and isinstance(it.func, ast.Name) else
                    it.func.attr if isinstance(it, ast.Call) and isinstance(it.func, ast.Attribute)
                    else None)
            if name == "range":
                node.iter = ast.copy_location(
                    ast.Call(func=ast.Name(id="_triton_cpu_loop", ctx=ast.Load()), args=[it],
                             keywords=[]), it)
            return node

    # The rewritten kernel runs in its module's globals, to which the interpreter adds its own
    # names (FunctionRewriter._compile_and_exec); the loop helper travels the same way.
    interp._triton_cpu_loop = loop_variable
    interp.FunctionRewriter.ast_transformer = LoopTransformer()
    interp.InterpretedFunction.rewritten_fn.clear()


def _patch_bf16(interp):
    import numpy as np
    import triton.language as tl
    B = interp.InterpreterBuilder
    TensorHandle = interp.TensorHandle

    def is_bf16(h):
        return isinstance(h, TensorHandle) and getattr(h.dtype, "scalar", None) == tl.bfloat16

    def widen(h):
        if not is_bf16(h):
            return h
        return TensorHandle(bf16_bits_to_f32(h.data), tl.float32)

    def narrow(h):  # an fp32 result of a bf16 operation -> bf16
        return TensorHandle(f32_to_bf16_bits(h.data), tl.bfloat16)

    binary_op, ternary_op, unary_op = B.binary_op, B.ternary_op, B.unary_op

    def binary_op_(self, lhs, rhs, op):
        if not (is_bf16(lhs) or is_bf16(rhs)):
            return binary_op(self, lhs, rhs, op)
        out = binary_op(self, widen(lhs), widen(rhs), op)
        if lhs.dtype.scalar == tl.bfloat16 and out.data.dtype != np.bool_:
            return narrow(out)
        return TensorHandle(out.data, lhs.dtype.scalar)  # a comparison: bool data

    def ternary_op_(self, lhs, rhs, other, op):
        if not any(is_bf16(h) for h in (lhs, rhs, other)):
            return ternary_op(self, lhs, rhs, other, op)
        out = ternary_op(self, widen(lhs), widen(rhs), widen(other), op)
        return narrow(out) if other.dtype.scalar == tl.bfloat16 else out

    def unary_op_(self, arg, op):
        if not is_bf16(arg):
            return unary_op(self, arg, op)
        return narrow(unary_op(self, widen(arg), op))

    def elementwise(method):  # fma (tl.math's other functions take fp32 and fp64 only)
        def wrapped(self, *args):
            if not any(is_bf16(a) for a in args):
                return method(self, *args)
            return narrow(method(self, *(widen(a) for a in args)))
        return wrapped

    create_dot = B.create_dot

    def create_dot_(self, a, b, d, input_precision, max_num_imprecise_acc):
        out = create_dot(self, widen(a), widen(b), widen(d), input_precision,
                         max_num_imprecise_acc)
        return narrow(out) if is_bf16(d) else out

    cast_impl, fp_to_fp = B.cast_impl, B.create_fp_to_fp

    def cast_impl_(self, src, dst_type):
        src_bf16, dst_bf16 = is_bf16(src), dst_type.scalar == tl.bfloat16
        if not (src_bf16 or dst_bf16):
            return cast_impl(self, src, dst_type)
        if src_bf16 and dst_bf16:
            return TensorHandle(src.data, tl.bfloat16)
        if dst_bf16:  # anything -> fp32 (exact for fp16, rounded for fp64 / wide ints) -> bf16
            return TensorHandle(f32_to_bf16_bits(src.data.astype(np.float32)), tl.bfloat16)
        return cast_impl(self, widen(src), dst_type)

    def create_fp_to_fp_(self, src, dst_type, rounding_mode):
        if not (is_bf16(src) or dst_type.scalar == tl.bfloat16):
            return fp_to_fp(self, src, dst_type, rounding_mode)
        if rounding_mode == interp._ir.ROUNDING_MODE.RTZ and dst_type.scalar == tl.bfloat16:
            bits = np.asarray(src.data, dtype=np.float32).view(np.uint32) >> np.uint32(16)
            return TensorHandle(bits.astype(np.uint16), tl.bfloat16)
        return cast_impl_(self, src, dst_type)

    B.binary_op, B.ternary_op, B.unary_op = binary_op_, ternary_op_, unary_op_
    B.create_fma = elementwise(B.create_fma)
    B.create_dot = create_dot_
    B.cast_impl = cast_impl_
    for name in ("create_si_to_fp", "create_ui_to_fp", "create_fp_to_si", "create_fp_to_ui",
                 "create_fp_ext", "create_fp_trunc"):
        setattr(B, name, lambda self, src, dst_type: self.cast_impl(src, dst_type))
    B.create_int_cast = lambda self, src, dst_type, is_signed: self.cast_impl(src, dst_type)
    B.create_fp_to_fp = create_fp_to_fp_

    # Reductions and scans (tl.sum, tl.max, tl.cumsum, ...) run in NumPy on the handles' data:
    # on bf16 they reduce fp32 values and round the result.
    apply = interp.ReduceScanOpInterface.apply

    def apply_(self, input):
        inputs = input if isinstance(input, tuple) else (input,)
        if not any(isinstance(t, tl.tensor) and t.dtype == tl.bfloat16 for t in inputs):
            return apply(self, input)
        wide = tuple(_retype(t, widen(t.handle), tl.float32) if t.dtype == tl.bfloat16 else t
                     for t in inputs)
        out = apply(self, wide if isinstance(input, tuple) else wide[0])
        outs = out if isinstance(out, tuple) else (out,)
        back = tuple(_retype(o, narrow(o.handle), tl.bfloat16)
                     if o.dtype == tl.float32 and i < len(inputs) and inputs[i].dtype ==
                     tl.bfloat16 else o for i, o in enumerate(outs))
        return back if isinstance(out, tuple) else back[0]

    interp.ReduceScanOpInterface.apply = apply_


def _reuse_language_patches(interp):
    """Speed only. The interpreter re-patches triton.language (inspect.getmembers over tl,
    tl.core, tl.math, tl.tensor) at every call of a @triton.jit device function made from a
    kernel (FLA's exp2, safe_dot, ...): a third of FLA's chunk time. While a kernel runs, the
    modules it patched stay patched, so a device function whose language modules are among them
    needs nothing more; the kernel's own restore() ends that."""
    import triton.language as tl
    patch_lang = interp._patch_lang
    active = set()

    def _patch_lang(fn):
        langs = {id(v) for v in fn.__globals__.values() if v is tl or v is tl.core}
        if active and langs <= active:
            return interp._LangPatchScope()  # nothing to restore
        scope = patch_lang(fn)
        if not active:  # the kernel's patches: restoring them ends the reuse
            restore = scope.restore

            def restore_and_forget():
                active.clear()
                restore()
            scope.restore = restore_and_forget
        active.update(langs)
        return scope

    interp._patch_lang = _patch_lang


class _Namespace:
    """A function's globals dict as an object, for _LangPatchScope.set_attr (getattr/setattr)."""

    def __init__(self, names):
        object.__setattr__(self, "_names", names)

    def __getattr__(self, name):
        try:
            return self._names[name]
        except KeyError:
            raise AttributeError(name) from None

    def __setattr__(self, name, value):
        self._names[name] = value

    def __delattr__(self, name):
        del self._names[name]


def _patch_aliases(interp):
    """A kernel's global names bound to Triton builtins (vLLM's `exp = tl.exp`) are patched like
    the builtins of triton.language while it runs; an alias already patched is no builtin."""
    import triton.language as tl
    patch_lang = interp._patch_lang

    def _patch_lang(fn):
        scope = patch_lang(fn)
        names = fn.__globals__
        for name, value in list(names.items()):
            if tl.core.is_builtin(value):
                interp._patch_attr(_Namespace(names), name, value, interp.interpreter_builder,
                                   scope)
        return scope

    interp._patch_lang = _patch_lang


def _retype(t, handle, scalar):
    import triton.language as tl
    ty = tl.block_type(scalar, list(t.type.shape)) if t.type.is_block() else scalar
    return tl.tensor(handle, ty)


def main():
    """`python triton_cpu.py [--T 128] [--seqs 1]`: seconds per call (CPU and wall, the second of
    two calls) of FLA's two Triton kernels on CPU tensors under the helped interpreter."""
    import argparse
    import inspect
    import time
    import warnings
    ap = argparse.ArgumentParser(description=main.__doc__.split(":")[0])
    ap.add_argument("--T", type=int, default=128, help="tokens (default 128)")
    ap.add_argument("--seqs", type=int, default=1, help="packed sequences (cu_seqlens)")
    ap.add_argument("--H", type=int, default=2)
    ap.add_argument("--HV", type=int, default=2)
    ap.add_argument("--K", type=int, default=64, help="K = V (default 64)")
    args = ap.parse_args()
    facts = enable()
    import torch
    torch.set_num_threads(1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from fla.ops.gated_delta_rule import (chunk_gated_delta_rule,
                                              fused_recurrent_gated_delta_rule)
    g = torch.Generator().manual_seed(0)
    T, H, HV, K = args.T, args.H, args.HV, args.K
    cu = torch.linspace(0, T, args.seqs + 1).long() if args.seqs > 1 else None
    print(f"FLA on CPU tensors, Triton {facts['triton']} interpreter: T={T}, "
          f"{args.seqs} sequence(s), H={H}, HV={HV}, K=V={K}, l2 norm in the kernel")
    for name, fn in (("chunk_gated_delta_rule", chunk_gated_delta_rule),
                     ("fused_recurrent_gated_delta_rule", fused_recurrent_gated_delta_rule)):
        for dtype in (torch.float32, torch.bfloat16):
            q, k = (torch.randn(1, T, H, K, generator=g).to(dtype) for _ in range(2))
            v = torch.randn(1, T, HV, K, generator=g).to(dtype)
            kw = dict(q=q, k=k, v=v, g=-torch.rand(1, T, HV, generator=g),
                      beta=torch.rand(1, T, HV, generator=g).to(dtype), output_final_state=True,
                      use_qk_l2norm_in_kernel=True, cu_seqlens=cu)
            inspect.unwrap(fn)(**kw)
            cpu, wall = time.process_time(), time.perf_counter()
            inspect.unwrap(fn)(**kw)
            print(f"  {name:34} {str(dtype).split('.')[1]:9} "
                  f"{time.process_time() - cpu:6.2f} s CPU {time.perf_counter() - wall:6.2f} s wall")
    return 0


if __name__ == "__main__":
    sys.exit(main())
