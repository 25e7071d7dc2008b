"""How a call's tensors reach the user's callable and come back: torch tensors (zero-copy DLPack
views of deltacheck's buffers on the CPU, copied to the device otherwise), JAX or MLX arrays
(_frameworks.py: the case's dtypes, bf16 as bf16) or NumPy arrays.

Outputs the callable allocates itself cannot be poisoned by deltacheck; with torch they are made
detectable by running the callable with deterministic algorithms on and
torch.utils.deterministic.fill_uninitialized_memory (torch.empty is then NaN-filled, so an
element the kernel never writes comes back NaN, which fails the case)."""
import contextlib
import types
import warnings

import numpy as np

from . import _deltacheck as _dc

_DTYPES = {"fp32": "float32", "fp64": "float64", "fp16": "float16", "bf16": "bfloat16",
           "int32": "int32", "int64": "int64", "uint8": "uint8"}


def torch_or_none():
    try:
        import torch
    except Exception:  # not installed, or broken: the NumPy route
        return None
    return torch


class TorchIO:
    """Torch tensors on `device`."""
    name = "torch"
    bf16_bits = False

    def __init__(self, torch, device):
        self.torch = torch
        self.device = torch.device(device)
        self.cpu = self.device.type == "cpu"
        fill = getattr(getattr(torch.utils, "deterministic", None), "fill_uninitialized_memory",
                       None)
        self.detects_unwritten = fill is not None
        self.unwritten_note = (
            "unwritten outputs: detected (the callable runs with torch deterministic algorithms "
            "and fill_uninitialized_memory, so torch.empty outputs are NaN-filled)"
            if self.detects_unwritten else
            f"unwritten outputs: NOT detectable (torch {torch.__version__} has no "
            "torch.utils.deterministic.fill_uninitialized_memory; an output the kernel allocates "
            "and never writes holds whatever memory it got)")

    def input(self, a):
        t = self.torch.from_dlpack(a)
        return t if self.cpu else t.to(self.device)

    def output(self, a):
        return self.torch.from_dlpack(a)

    def write(self, name, view, value):
        if not isinstance(value, self.torch.Tensor):
            value = self.torch.as_tensor(np.asarray(value))
        if tuple(value.shape) != tuple(view.shape):
            raise ValueError(f"output {name}: shape {tuple(value.shape)} returned, "
                             f"{tuple(view.shape)} expected")
        view.copy_(value.detach())  # rounds floats to the output's dtype (to nearest even)

    def zeros(self, shape, dtype):
        return self.torch.zeros(shape, dtype=getattr(self.torch, _DTYPES[dtype]),
                                device=self.device)

    def arange(self, n, dtype):
        return self.torch.arange(n, dtype=getattr(self.torch, _DTYPES[dtype]), device=self.device)

    def copy(self, x):
        return x.clone()

    def stack(self, xs):
        return self.torch.stack(list(xs))

    def synchronize(self, out=None):
        if self.device.type == "cuda":
            self.torch.cuda.synchronize(self.device)

    @contextlib.contextmanager
    def guard(self):
        """Deterministic algorithms (warnings only) and NaN-filled torch.empty during the call."""
        if not self.detects_unwritten:
            yield
            return
        torch = self.torch
        det = torch.utils.deterministic
        was_on = torch.are_deterministic_algorithms_enabled()
        was_warn = torch.is_deterministic_algorithms_warn_only_enabled()
        was_fill = det.fill_uninitialized_memory
        torch.use_deterministic_algorithms(True, warn_only=True)
        det.fill_uninitialized_memory = True
        try:
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=".*deterministic.*")
                yield
        finally:
            det.fill_uninitialized_memory = was_fill
            torch.use_deterministic_algorithms(was_on, warn_only=was_warn)


class NumpyIO:
    """NumPy arrays on the CPU; bf16 inputs widened to float32 (exactly), bf16 outputs rounded
    to nearest even."""
    name = "numpy"
    bf16_bits = True  # the extension hands bf16 as uint16 bit patterns
    detects_unwritten = False
    unwritten_note = ("unwritten outputs: NOT detectable (NumPy arrays the callable allocates "
                      "cannot be poisoned; outputs written in place into deltacheck's buffers "
                      "would be)")

    def input(self, a):
        x = np.from_dlpack(a)
        if x.dtype == np.uint16:  # bf16 bits (deltacheck has no uint16 tensors)
            return _dc.widen_bf16(x)
        return x

    def output(self, a):
        return np.from_dlpack(a)

    def write(self, name, view, value):
        value = np.asarray(value)
        if value.shape != view.shape:
            raise ValueError(f"output {name}: shape {value.shape} returned, {view.shape} expected")
        if view.dtype == np.uint16:  # bf16 bits: rounded to nearest even by the extension
            _dc.store_bf16(view, np.ascontiguousarray(value, dtype=np.float32))
        elif view.dtype == np.float16 and value.dtype != np.float16 and view.flags.c_contiguous:
            # rounded to nearest even by the extension (NumPy's own cast is 4x slower)
            _dc.store_f16(view.view(np.uint16), np.ascontiguousarray(value, dtype=np.float32))
        else:
            view[...] = value

    def zeros(self, shape, dtype):
        return np.zeros(shape, dtype=_DTYPES[dtype])

    def arange(self, n, dtype):
        return np.arange(n, dtype=_DTYPES[dtype])

    def copy(self, x):
        return np.array(x, copy=True)

    def stack(self, xs):
        return np.stack(list(xs))

    def synchronize(self, out=None):
        pass

    @contextlib.contextmanager
    def guard(self):
        yield


FRAMEWORKS = ("torch", "jax", "mlx", "numpy")


def make_io(framework, device, fn=None):
    """The IO route: `framework` when given; else the one `fn` is written with (detect(): its
    module uses jax or mlx), else torch when importable, else NumPy."""
    if framework not in (None,) + FRAMEWORKS:
        raise ValueError(f"framework must be one of {', '.join(map(repr, FRAMEWORKS))}, "
                         f"not {framework!r}")
    if framework is None and fn is not None:
        framework = detect(fn)
    if framework in ("jax", "mlx"):
        from . import _frameworks
        return _frameworks.make(framework, device)
    torch = torch_or_none() if framework != "numpy" else None
    if framework == "torch" and torch is None:
        raise ImportError("framework='torch' but torch is not importable")
    if torch is None:
        if device != "cpu":
            raise ValueError(f"device={device!r} needs torch; the NumPy route runs on the CPU")
        return NumpyIO()
    return TorchIO(torch, device)


def _globals_of(fn):
    """The global namespaces of the functions behind `fn` (functools.partial, wrappers'
    __wrapped__ such as jax.jit's, bound methods, callable objects), as far as they go."""
    seen, spaces = set(), []
    todo = [fn]
    while todo and len(seen) < 16:
        f = todo.pop()
        if f is None or id(f) in seen:
            continue
        seen.add(id(f))
        g = getattr(f, "__globals__", None)
        if isinstance(g, dict):
            spaces.append(g)
        todo += [getattr(f, "func", None), getattr(f, "__wrapped__", None),
                 getattr(f, "__func__", None)]
        call = getattr(type(f), "__call__", None)
        if call is not None and not isinstance(f, type) and getattr(call, "__globals__", None):
            todo.append(call)
    return spaces


def detect(fn):
    """"jax" or "mlx" when the module `fn` is defined in uses that framework (a global bound
    to one of its modules or functions, e.g. `import jax.numpy as jnp`, `import mlx.core as mx`,
    `from jax import lax`) and no other of torch, jax, mlx; a jax.jit-wrapped function is JAX's.
    None otherwise (the old rule: torch when importable, else NumPy). More than one: a
    ValueError asking for framework=."""
    kind = type(fn).__module__.split(".")[0]
    if kind in ("jax", "jaxlib"):
        return "jax"
    found = set()
    for space in _globals_of(fn):
        for value in list(space.values()):
            try:
                name = (value.__name__ if isinstance(value, types.ModuleType)
                        else getattr(value, "__module__", None))
            except Exception:  # an object whose attribute lookup raises: not a framework's
                continue
            root = name.split(".")[0] if isinstance(name, str) else ""
            if root in ("torch", "jax", "jaxlib", "mlx"):
                found.add("jax" if root == "jaxlib" else root)
    if len(found) > 1:
        raise ValueError(f"{getattr(fn, '__name__', fn)!r} is defined next to "
                         f"{' and '.join(sorted(found))}: say which arrays it takes with "
                         f"framework={'|'.join(repr(f) for f in sorted(found))}")
    found.discard("torch")  # torch alone: the old rule (torch when importable) gives torch
    return found.pop() if found else None
