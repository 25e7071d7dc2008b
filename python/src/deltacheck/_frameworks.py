"""The JAX and MLX routes (docs/python.md, "JAX and MLX"): a case's tensors as jax.Array or
mlx.core.array in the case's dtypes (bf16 as jnp.bfloat16 / mx.bfloat16), the callable's outputs
copied back into deltacheck's buffers, and the gradients of gdr_grad cases taken by jax.vjp /
mx.vjp (_grad.py).

The extension hands bf16 as uint16 bit patterns (bf16_bits, as for NumPy, so that the output
buffers are writable NumPy views); JAX takes an input by jnp.from_dlpack (which copies on the CPU
build tested, jax 0.10.2: a write to the NumPy array after it does not show), MLX copies it into
an mx.array, and a bf16 one is reinterpreted as bf16 (a
bitcast: its bits, not a rounding). Outputs: a bf16 result is widened to float32 (exact) and stored back
as bf16 by the extension (the same bits); any other float result is rounded to the output's
dtype to nearest even, as on the NumPy route.

Arrays of both frameworks are immutable, so a convention that lets the kernel write into a
buffer in place (vllm's slot pool) cannot be used (unsupported, with that reason), and an output
the kernel never computes cannot hold garbage: jnp.empty / mx.zeros give zeros, which the
comparison judges like any other value. MLX is lazy: the callable's outputs are evaluated
(mx.eval) before its time stops."""
import contextlib

import numpy as np

from ._io import _DTYPES, NumpyIO


class _FrameworkIO:
    """What the JAX and MLX routes share: NumPy views of the outputs, bf16 as uint16 bits."""
    bf16_bits = True
    mutable = False  # arrays cannot be written in place (conventions with in_place: unsupported)
    detects_unwritten = False

    def output(self, a):
        return np.from_dlpack(a)

    def to_numpy(self, value):
        """`value` as a NumPy array: a bf16 one widened to float32 (exactly)."""
        raise NotImplementedError

    def write(self, name, view, value):
        # as on the NumPy route: bf16 and fp16 outputs rounded to nearest even by the extension
        NumpyIO.write(self, name, view, self.to_numpy(value))

    @contextlib.contextmanager
    def guard(self):
        yield


class JaxIO(_FrameworkIO):
    """jax.Array on the CPU. With JAX's default 32-bit mode (jax_enable_x64 off) int64
    cu_seqlens arrive as int32, as JAX makes every int64 array."""
    name = "jax"
    unwritten_note = ("unwritten outputs: not applicable (JAX arrays are never uninitialized: "
                      "jnp.empty is zeros; a value never computed is judged as the zero it is)")

    def __init__(self, device):
        import jax
        import jax.numpy as jnp
        self.jax, self.jnp = jax, jnp
        self.device = device

    def input(self, a):
        x = np.from_dlpack(a)
        if x.dtype == np.uint16:  # bf16 bits (deltacheck has no uint16 tensors)
            return self.jax.lax.bitcast_convert_type(self.jnp.from_dlpack(x), self.jnp.bfloat16)
        return self.jnp.from_dlpack(x)

    def to_numpy(self, value):
        jnp = self.jnp
        if isinstance(value, self.jax.Array) and value.dtype == jnp.bfloat16:
            value = value.astype(jnp.float32)
        return np.asarray(value)

    def zeros(self, shape, dtype):
        return self.jnp.zeros(shape, dtype=_DTYPES[dtype])

    def arange(self, n, dtype):
        return self.jnp.arange(n, dtype=_DTYPES[dtype])

    def copy(self, x):
        return self.jnp.array(x, copy=True)

    def stack(self, xs):
        return self.jnp.stack(list(xs))

    def synchronize(self, out=None):
        if out is not None:
            self.jax.block_until_ready(out)

    def is_array(self, x):
        return isinstance(x, self.jax.Array)  # tracers included

    def vjp(self, forward, primals, upstream):
        """The gradients of `primals` by jax.vjp of `forward` (a tuple of arrays) with the
        cotangents `upstream`, each cast to its output's dtype."""
        jnp = self.jnp
        outs, pullback = self.jax.vjp(forward, *primals)
        return pullback(tuple(jnp.asarray(u).astype(o.dtype) for o, u in zip(outs, upstream)))


class MlxIO(_FrameworkIO):
    """mlx.core.array on the CPU device (mlx[cpu])."""
    name = "mlx"
    unwritten_note = ("unwritten outputs: not applicable (MLX arrays are never uninitialized; "
                      "a value never computed is judged as the zero it is)")

    def __init__(self, device):
        import mlx.core as mx
        self.mx = mx
        self.device = device

    def input(self, a):
        mx = self.mx
        x = np.from_dlpack(a)
        if x.dtype == np.uint16:  # bf16 bits
            return mx.array(x).view(mx.bfloat16)
        return mx.array(x)

    def to_numpy(self, value):
        mx = self.mx
        if isinstance(value, mx.array):
            if value.dtype == mx.bfloat16:
                value = value.astype(mx.float32)
            mx.eval(value)
        return np.asarray(value)

    def zeros(self, shape, dtype):
        return self.mx.zeros(shape, dtype=getattr(self.mx, _DTYPES[dtype]))

    def arange(self, n, dtype):
        return self.mx.arange(n, dtype=getattr(self.mx, _DTYPES[dtype]))

    def copy(self, x):
        return self.mx.array(x)

    def stack(self, xs):
        return self.mx.stack(list(xs))

    def synchronize(self, out=None):
        arrays = [x for x in (out if isinstance(out, (tuple, list)) else (out,))
                  if isinstance(x, self.mx.array)]
        if arrays:
            self.mx.eval(*arrays)

    def is_array(self, x):
        return isinstance(x, self.mx.array)

    def vjp(self, forward, primals, upstream):
        """The gradients of `primals` by mx.vjp of `forward` with the cotangents `upstream`.
        mx.vjp takes the cotangents before the outputs exist, so each output is cast to its
        cotangent's dtype inside the differentiated function: the cotangent reaching the
        kernel's output is then the upstream gradient cast to that output's dtype, as on the
        torch and JAX routes (a bf16 do widened exactly for an fp32 o)."""
        mx = self.mx

        def cast_forward(*xs):
            return [o.astype(u.dtype) for o, u in zip(forward(*xs), upstream)]

        _, grads = mx.vjp(cast_forward, list(primals), list(upstream))
        return tuple(grads)


def make(framework, device):
    if str(device) != "cpu":
        raise ValueError(f"device={device!r}: the {framework} route runs on the CPU (its arrays "
                         "are the host's; device='cpu')")
    try:
        return JaxIO(device) if framework == "jax" else MlxIO(device)
    except ImportError as e:
        raise ImportError(f"framework={framework!r} but {framework} is not importable: "
                          f"{e}") from None
