"""The JAX kernel's compiled shapes are kept across runs (JAX's persistent compilation cache in
DELTACHECK_JAX_CACHE, default ~/.cache/deltacheck/jax-compilation-cache), as a JAX project's
test suite would keep them: the first run compiles about twenty shapes of the test kernel."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

try:
    import jax
except ImportError:  # the MLX tests alone
    jax = None

if jax is not None:
    cache = os.environ.get("DELTACHECK_JAX_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "deltacheck", "jax-compilation-cache")
    try:
        os.makedirs(cache, exist_ok=True)
        jax.config.update("jax_compilation_cache_dir", cache)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    except OSError:  # no writable home: compiled anew each run
        pass
