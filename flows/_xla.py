"""The library's performance workarounds, in one place: compile options passed per program (no global JAX or XLA
setting changes), the PRNG rewrapping of `flows._prng` and one process-wide change, glibc's malloc thresholds
raised once (`retain_scratch`), each switched by a field of `config` and each paid
for by a row of `benchmarks/bench_workarounds.py` (results in `benchmarks/results/workarounds.json`: the first
call in a fresh process with the workaround on against off).

- `xla_cpu_use_fusion_emitters=False` (`config.classic_emitters`): XLA's classic CPU emitters compile the
  same kernels faster (rows `workarounds/classic_emitters(scan_snap.train)` and `(mean_field.train)`); other
  backends ignore the option.
- `jit(..., one_shot=True)` (`config.one_shot_level0`): small programs that run once per call (random draws
  of a data set) compile at `xla_backend_optimization_level=0`, a shorter compile (row
  `workarounds/one_shot_level0(mean_field data)`; a value may change in its last bit).
- `flows._prng.fused` (`config.fused_prng`): threefry draws with the hash unrolled, the same bits, shorter
  compiles and runs of draw-heavy programs (rows `workarounds/fused_prng(...)`, and the Fig. 6 sweep of
  `benchmarks/bench_scan_snap.py`). Inside a jit trace only: an eager draw on a rewrapped key would run the
  hash one operation at a time (every Scan and Snap `solve_flow` and `train` call derives its keys eagerly),
  where JAX's own threefry is one dispatch.
- `xla_cpu_experimental_ynn_fusion_type=LIBRARY_FUSION_TYPE_REDUCE` for the programs of a sweep
  (`config.ynn_reduce_only`; `jit(..., batched=True)`, `compile_lowered(..., batched=True)`: `flows.solve_batch`'s
  solves and the systems' `train_sweep`): YNNPACK fusions for reductions only. XLA 0.10's CPU compiler also
  hands dot and elementwise fusions to YNNPACK; on a sweep's stacked small states and on its batched float64
  products those run slower than XLA's own kernels and Eigen's products (rows `workarounds/ynn_reduce_only(...)`).
  Without any YNNPACK fusion a sweep runs about as fast but compiles longer; the programs of single solves and
  single runs (compile-bound) keep XLA's default. Other backends ignore the option.
- `xla_cpu_use_fusion_emitters=True` for a training sweep's program (`config.training_sweep_emitters`;
  `batched="training"`: `train_sweep`): the run of many networks for many steps is long next to its compile,
  and XLA's fusion emitters vectorise its elementwise kernels (the softmax exponentials, the class draw's
  logarithms, the optimiser's update) where the classic ones do not; they compile longer, so every other
  program keeps `classic_emitters` (row
  `workarounds/training_sweep_emitters(scan_snap.train_sweep, Fig. 6 K=20, 100 steps)`).
- glibc keeps the scratch memory of XLA's CPU runtime (`config.retain_scratch`): the first time the library
  compiles a program, `retain_scratch()` allocates and frees one block of just under 32 MiB through the C
  library's `malloc`. Freeing a block that size raises glibc's dynamic thresholds to their maximum (requests up
  to 32 MiB come from its arenas, and an arena keeps up to 64 MiB free at its top), as any program that frees
  such a block does. Without it, the worker threads' per-step scratch of a large training sweep is handed
  back to the kernel at each step (`madvise`) and faulted in again at the next: millions of page faults and
  seconds of system time in the Fig. 6 sweep (row `workarounds/retain_scratch(...)`). It changes no value.
  Only on Linux with glibc; once per process, and not undone when the field is switched off afterwards.
- `config.xla_defaults = True`: XLA's defaults for every program compiled after it, whatever the other fields.

The caches of compiled programs key on every field through `options_key`.
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import platform

import jax
from jax.extend.core import unsafe_am_i_under_a_jit_DO_NOT_USE as _under_a_jit

__all__ = ["Config", "compile_lowered", "compiler_options", "config", "jit", "options_key", "retain_scratch"]


@dataclasses.dataclass
class Config:
    """The library's performance switches (one instance, `config`, read whenever a program is traced or
    compiled); each workaround's benchmark row is `workarounds/<field>(<entry point>)`.

    **Arguments:**

    - `xla_defaults`: compile with XLA's default options instead of the library's (module docstring).
    - `classic_emitters`: compile with `xla_cpu_use_fusion_emitters=False` (a shorter compile on CPU).
    - `one_shot_level0`: compile `jit(..., one_shot=True)` programs at XLA backend level 0 (a shorter compile).
    - `fused_prng`: `flows._prng.fused` rewraps threefry keys inside jit traces (the unrolled hash: shorter
      compiles and runs).
    - `ynn_reduce_only`: compile a sweep's programs with YNNPACK fusions for reductions only (module docstring).
    - `training_sweep_emitters`: compile a training sweep's program with XLA's fusion emitters (module docstring).
    - `retain_scratch`: raise glibc's malloc thresholds once, before the first compile (`retain_scratch`).
    """

    xla_defaults: bool = False
    classic_emitters: bool = True
    one_shot_level0: bool = True
    fused_prng: bool = True
    ynn_reduce_only: bool = True
    training_sweep_emitters: bool = True
    retain_scratch: bool = True


config = Config()

#: the block `retain_scratch` allocates and frees: glibc's mmapped chunk of it (the request and its header,
#: rounded up to pages) is just under DEFAULT_MMAP_THRESHOLD_MAX (32 MiB on 64-bit), the largest freed chunk that
#: still raises the dynamic thresholds
_SCRATCH_BLOCK = 32 * 2**20 - 2 * 4096
_retained = False


def retain_scratch() -> bool:
    """Raise glibc's dynamic malloc thresholds to their maximum, once per process, under `config.retain_scratch`
    (module docstring): allocate and free one block of `_SCRATCH_BLOCK` bytes. Returns whether it did so now
    (False: done before, switched off, or not glibc)."""
    global _retained
    if _retained or not config.retain_scratch:
        return False
    _retained = True
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL(None)
        malloc, free = libc.malloc, libc.free
    except (OSError, AttributeError):
        return False
    malloc.restype, malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    free.restype, free.argtypes = None, [ctypes.c_void_p]
    block = malloc(_SCRATCH_BLOCK)
    if not block:
        return False
    free(block)
    return True


#: the kinds of program `batched` names: a sweep's (`True`: `flows.solve_batch`'s solves) and a training
#: sweep's (`"training"`: the systems' `train_sweep`), besides a single program (`False`)
BATCHED = (False, True, "training")


def compiler_options(one_shot: bool = False, batched: bool | str = False) -> dict | None:
    """The options the library compiles its programs with under `config` (None: XLA's defaults); `one_shot`:
    those of `jit(..., one_shot=True)`, `batched`: those of a sweep's program (`True`) or of a training sweep's
    (`"training"`) (module docstring)."""
    if batched not in BATCHED:
        raise ValueError(f"batched must be one of {BATCHED}, got {batched!r}")
    retain_scratch()
    if config.xla_defaults:
        return None
    options: dict = {}
    if config.classic_emitters and not (batched == "training" and config.training_sweep_emitters):
        options["xla_cpu_use_fusion_emitters"] = False
    if batched and config.ynn_reduce_only:
        options["xla_cpu_experimental_ynn_fusion_type"] = "LIBRARY_FUSION_TYPE_REDUCE"
    if one_shot and config.one_shot_level0:
        options["xla_backend_optimization_level"] = 0
    return options or None


class _Jit:
    """A `jax.jit` with the library's compile options at the top level and without them when called inside
    a jit trace (JAX accepts `compiler_options` only on a top-level jit): the same function either way."""

    def __init__(self, fun, kwargs, one_shot, batched):
        self._fun, self._kwargs, self._one_shot, self._batched = fun, kwargs, one_shot, batched
        self._nested = jax.jit(fun, **kwargs)
        self._top = {}  # one jax.jit per set of options: a change of `config` takes effect at the next call
        functools.update_wrapper(self, fun)

    def _top_jit(self):
        options = compiler_options(self._one_shot, self._batched)
        if options is None:
            return self._nested
        key = tuple(sorted(options.items()))
        if key not in self._top:
            self._top[key] = jax.jit(self._fun, compiler_options=options, **self._kwargs)
        return self._top[key]

    def __call__(self, *args, **kwargs):
        if _under_a_jit() or any(isinstance(x, jax.core.Tracer) for x in jax.tree_util.tree_leaves((args, kwargs))):
            return self._nested(*args, **kwargs)
        return self._top_jit()(*args, **kwargs)

    def lower(self, *args, **kwargs):
        return self._top_jit().lower(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._nested, name)


def jit(fun=None, *, one_shot: bool = False, batched: bool | str = False, **kwargs):
    """`jax.jit` with the library's compile options (usable as `@jit` or `@partial(jit, static_argnames=...)`);
    called inside another jit (or vmap, grad) it is the plain `jax.jit` of the same function.

    **Arguments:**

    - `fun`: the function.
    - `one_shot`: compile with `compiler_options(one_shot=True)` (module docstring).
    - `batched`: compile with `compiler_options(batched=batched)`, the options of a sweep's program (`True`) or
      a training sweep's (`"training"`).
    - `kwargs`: `jax.jit`'s other keywords.
    """
    if fun is None:
        return lambda f: jit(f, one_shot=one_shot, batched=batched, **kwargs)
    return _Jit(fun, kwargs, one_shot, batched)


def compile_lowered(lowered, batched: bool | str = False):
    """`lowered.compile()` with the library's compile options (`batched`: those of a sweep's program, `True`, or
    of a training sweep's, `"training"`)."""
    return lowered.compile(compiler_options=compiler_options(batched=batched))


def options_key():
    """The settings besides the program that decide its compiled code, for the keys of the library's own caches
    of compiled programs: every field of `config` and `jax_disable_most_optimizations` (XLA backend level 0, a
    runtime flag; the test suite compiles its compile-bound tests with it). A program compiled under one value
    is not reused under another."""
    return dataclasses.astuple(config), bool(jax.config.read("jax_disable_most_optimizations"))
