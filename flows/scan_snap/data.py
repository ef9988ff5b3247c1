"""Sequence classes of Scan and Snap (Tian, Wang, Chen, Du, NeurIPS 2023, Sec. 3.2, Assumption 1a): a class n is
(P(l|n), query psi(n), next token n) over one vocabulary of M tokens; distinct tokens (DT) belong to one class's
support, common tokens (CT) to several. `sample_counts` draws the context counts N ~ Multinomial(T-1, P(.|n))
and `sample_tokens` the literal sequences from the same random numbers. See docs/systems/scan_snap.md."""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .._checks import check_int, check_real, real_array
from .._prng import fused

__all__ = [
    "SYN_MEDIUM_QUERIES",
    "ClassArrays",
    "SequenceClasses",
    "sample_counts",
    "sample_support_counts",
    "sample_tokens",
    "syn_medium",
    "syn_small",
    "zipfian",
]


class ClassArrays(NamedTuple):
    """The jit-friendly arrays of a `SequenceClasses` (a pytree).

    - `cond`: (K, M) P(l|n); `query`: (K,) psi(n); `next_token`: (K,) vocabulary index of n;
    - `class_probs`: (K,) P(n); `support_index`: (K, S) token indices of supp(n), padded;
    - `support_cdf`: (K, S) cumulative P(l|n) over `support_index` (last entry 1);
    - `query_tokens`: (L,) the distinct query tokens, sorted (`SequenceClasses.query_tokens`): the rows of Z
      that the network's parameters hold; `query_row`: (K,) the row of psi(n) among them; `query_onehot`:
      (K, L) that row one-hot (z_{psi(n)} = `query_onehot` @ Z_q for the (L, M) query rows Z_q).
    """

    cond: jax.Array
    query: jax.Array
    next_token: jax.Array
    class_probs: jax.Array
    support_index: jax.Array
    support_cdf: jax.Array
    query_tokens: jax.Array
    query_row: jax.Array
    query_onehot: jax.Array


def _readonly(a):
    a = np.array(a)
    a.flags.writeable = False
    return a


@dataclasses.dataclass(frozen=True, eq=False)
class SequenceClasses:
    """A validated, immutable set of K sequence classes over a vocabulary of M tokens.

    **Fields:**

    - `cond_probs`: (K, M) array, row n is P(.|n) over context tokens (>= 0, rows sum to 1).
    - `query`: K ints in [0, M): the query token psi(n) of each class.
    - `next_token`: K distinct ints in [0, M): the vocabulary index of the next token n.
    - `class_probs`: (K,) P(n), default uniform 1/K (Theorem 1 uses uniform classes).
    - `name`: a label.

    Raises `ValueError` naming the field on bad input.
    """

    cond_probs: np.ndarray
    query: tuple
    next_token: tuple
    class_probs: np.ndarray | None = None
    name: str = "classes"

    def __post_init__(self):
        cond = real_array("cond_probs", self.cond_probs, finite=False)
        if cond.ndim != 2 or cond.shape[0] < 1 or cond.shape[1] < 2:
            raise ValueError(f"cond_probs must be a (K >= 1, M >= 2) array, got shape {cond.shape}")
        K, M = cond.shape
        if not np.all(np.isfinite(cond)) or np.any(cond < 0):
            raise ValueError("cond_probs must be finite and >= 0")
        if not np.allclose(cond.sum(axis=1), 1.0, rtol=0, atol=1e-9):
            raise ValueError(f"cond_probs rows must sum to 1 (allowed error 1e-9), got {cond.sum(axis=1)}")
        for field in ("query", "next_token"):
            raw = real_array(field, getattr(self, field), finite=False).ravel()
            if not np.all(np.isfinite(raw)) or np.any(raw != np.round(raw)):
                raise ValueError(f"{field} entries must be integers, got {getattr(self, field)!r}")
            vals = tuple(int(v) for v in raw)
            if len(vals) != K:
                raise ValueError(f"{field} must have K = {K} entries, got {len(vals)}")
            if any(v < 0 or v >= M for v in vals):
                raise ValueError(f"{field} entries must lie in [0, M) = [0, {M}), got {vals}")
            object.__setattr__(self, field, vals)
        if len(set(self.next_token)) != K:
            raise ValueError(f"next_token entries must be distinct, got {self.next_token}")
        probs = self.class_probs
        probs = np.full(K, 1.0 / K) if probs is None else real_array("class_probs", probs, finite=False)
        if probs.shape != (K,) or not np.all(np.isfinite(probs)) or np.any(probs <= 0):
            raise ValueError(f"class_probs must be K = {K} positive finite numbers, got {self.class_probs}")
        if abs(probs.sum() - 1.0) > 1e-9:
            raise ValueError(f"class_probs must sum to 1 (allowed error 1e-9), got sum {probs.sum()}")
        object.__setattr__(self, "cond_probs", _readonly(cond))
        object.__setattr__(self, "class_probs", _readonly(probs))
        if not isinstance(self.name, str) or not self.name:
            raise ValueError("name must be a non-empty string")

    @classmethod
    def from_weights(
        cls, weights: Any, query: Any, next_token: Any, class_probs: Any = None, name: str = "classes"
    ) -> SequenceClasses:
        """Classes from unnormalised non-negative weights (K, M); each row is normalised to P(.|n)."""
        w = np.asarray(weights, dtype=float)
        if w.ndim != 2 or not np.all(np.isfinite(w)) or np.any(w < 0) or np.any(w.sum(axis=1) <= 0):
            raise ValueError("weights must be a finite non-negative (K, M) array with positive row sums")
        return cls(w / w.sum(axis=1, keepdims=True), query, next_token, class_probs, name)

    # -- sizes and token kinds ---------------------------------------------------------
    @property
    def num_classes(self) -> int:
        """K."""
        return self.cond_probs.shape[0]

    @property
    def vocab_size(self) -> int:
        """M (the one-hot size: contexts, queries and next tokens)."""
        return self.cond_probs.shape[1]

    @property
    def query_tokens(self) -> tuple:
        """The distinct query tokens, sorted."""
        return tuple(sorted(set(self.query)))

    @property
    def support(self) -> np.ndarray:
        """(K, M) bool: P(l|n) > 0."""
        return self.cond_probs > 0

    @property
    def omega_size(self) -> np.ndarray:
        """(M,) |Omega(l)|: the number of classes whose support contains l."""
        return self.support.sum(axis=0)

    @property
    def distinct_mask(self) -> np.ndarray:
        """(K, M) bool: l is a distinct token of class n (|Omega(l)| = 1, l in supp(n))."""
        return self.support & (self.omega_size == 1)[None, :]

    @property
    def common_mask(self) -> np.ndarray:
        """(M,) bool: l is a common token (|Omega(l)| > 1)."""
        return self.omega_size > 1

    def arrays(self, dtype: Any = None) -> ClassArrays:
        """The classes as jnp arrays (floats in `dtype`, default JAX's default float)."""
        dtype = dtype or jnp.result_type(float)
        S = int(self.support.sum(axis=1).max())
        idx = np.zeros((self.num_classes, S), dtype=np.int32)
        cdf = np.ones((self.num_classes, S))
        for n in range(self.num_classes):
            sup = np.flatnonzero(self.support[n])
            idx[n, : sup.size] = sup
            idx[n, sup.size :] = sup[-1]
            c = np.cumsum(self.cond_probs[n, sup])
            c[-1] = 1.0
            cdf[n, : sup.size] = c
        row = {q: i for i, q in enumerate(self.query_tokens)}
        query_row = np.asarray([row[q] for q in self.query], np.int32)
        return ClassArrays(
            cond=jnp.asarray(self.cond_probs, dtype),
            query=jnp.asarray(self.query, jnp.int32),
            next_token=jnp.asarray(self.next_token, jnp.int32),
            class_probs=jnp.asarray(self.class_probs, dtype),
            support_index=jnp.asarray(idx),
            support_cdf=jnp.asarray(cdf, dtype),
            query_tokens=jnp.asarray(self.query_tokens, jnp.int32),
            query_row=jnp.asarray(query_row),
            query_onehot=jnp.asarray(np.eye(len(row))[query_row], dtype),
        )


def syn_small() -> SequenceClasses:
    """Syn-Small (paper Sec. 8; official `figure_4`): K = 2 classes, each with its own query token.

    Tokens 0-9: common (weight 1 each); 10-19: DTs of class 0, 20-29: DTs of class 1, weights
    linspace(0.1, 1, 10) (so P(l|n) increases with l); queries 30, 31; next tokens 32, 33. M = 34.
    """
    return _generator(2, 1, 10, 10, "syn_small")


#: the numbers of query tokens L of the paper's Syn-Medium, one panel of Fig. 6 each (official `figure_6`,
#: `num_last`): K = 2L = 2, 6, 10, 20 classes over M = 10 + 23 L = 33, 79, 125, 240 tokens
SYN_MEDIUM_QUERIES = (1, 3, 5, 10)


def syn_medium(num_queries: int) -> SequenceClasses:
    """Syn-Medium (Fig. 6; official `figure_6`): L = `num_queries` query tokens with 2 next tokens each, K = 2L.

    The paper's Syn-Medium is the family L in {1, 3, 5, 10} (`SYN_MEDIUM_QUERIES`; Fig. 6's four panels
    "#last/next = 1/2, 3/6, 5/10, 10/20"), i.e. K = 2, 6, 10, 20 classes over M = 33, 79, 125, 240 tokens;
    there is no single default size. Other L give the same construction at other sizes.

    Tokens 0-9: common to all classes (weight 1); then 10 DTs per class (weights linspace(0.1, 1, 10)),
    class k owns 10 + 10k ... 10 + 10k + 9; then the L query tokens, then the K next tokens. M = 10 + 23 L.
    Class k has query token number k // 2.
    """
    num_queries = check_int("num_queries", num_queries, 1, integral_float=True)
    return _generator(num_queries, 2, 10, 10, f"syn_medium_{num_queries}", fields="num_queries")


#: the largest (K, M) table of conditional probabilities the generators build (2 GiB in float64)
_MAX_ENTRIES = 2**28


def _table_size(num_queries, next_per_query, num_common, num_distinct, fields):
    """(K, M) of the generated classes; a ValueError naming `fields` past `_MAX_ENTRIES` entries."""
    K = num_queries * next_per_query
    M = num_common + K * num_distinct + num_queries + K
    if K * M > _MAX_ENTRIES:
        raise ValueError(
            f"{fields} give K = {K} classes over M = {M} tokens, a (K, M) table of more than 2**28 entries"
        )
    return K, M


def _generator(num_queries, next_per_query, num_common, num_distinct, name, dw=None, cw=None, fields="the sizes"):
    """The classes of `syn_small`, `syn_medium`, `zipfian`: DT weights `dw` (default linspace(0.1, 1)), CT
    weights `cw` (default 1)."""
    K, M = _table_size(num_queries, next_per_query, num_common, num_distinct, fields)
    w = np.zeros((K, M))
    dw = np.linspace(0.1, 1.0, num_distinct) if dw is None else dw
    cw = np.ones(num_common) if cw is None else cw
    for k in range(K):
        w[k, :num_common] = cw
        start = num_common + k * num_distinct
        w[k, start : start + num_distinct] = dw
    q0 = num_common + K * num_distinct
    query = [q0 + k // next_per_query for k in range(K)]
    nxt = [q0 + num_queries + k for k in range(K)]
    return SequenceClasses.from_weights(w, query, nxt, name=name)


def zipfian(
    num_queries: int = 2, next_per_query: int = 1, num_distinct: int = 10, num_common: int = 5, exponent: float = 1.0
) -> SequenceClasses:
    """User-defined classes with Zipfian weights: the DTs of each class get 1/rank^s (rank 1 = most
    frequent, placed last so that P(l|n) increases with the token index as in Syn-Small), the CTs get
    1/rank^s over ranks 1..num_common. Same token numbering as `syn_small` / `syn_medium`."""
    fields = dict(num_queries=num_queries, next_per_query=next_per_query, num_distinct=num_distinct)
    num_queries, next_per_query, num_distinct = (check_int(k, v, 1, integral_float=True) for k, v in fields.items())
    num_common = check_int("num_common", num_common, 0, integral_float=True)
    exponent = check_real("exponent", exponent, low=0.0)
    names = "num_queries, next_per_query, num_distinct and num_common"
    _table_size(num_queries, next_per_query, num_common, num_distinct, names)  # before the weights
    dw = 1.0 / np.arange(num_distinct, 0, -1) ** exponent
    cw = 1.0 / np.arange(1, num_common + 1) ** exponent
    return _generator(num_queries, next_per_query, num_common, num_distinct, "zipfian", dw, cw, names)


def _draw(arrays: ClassArrays, key, batch_size: int, T: int):
    """Class indices (B,) and uniforms (B, T-1): the shared randomness of both samplers (`jax.random` on the
    key rewrapped by `flows._prng.fused`: the same draws; see `flows._xla` for why)."""
    k_cls, k_tok = jax.random.split(fused(key))
    # class n with probability P(n) by the inverse cdf: n = #{k < K-1 : P(0) + ... + P(k) <= v}, one uniform
    # per sequence (a Gumbel argmax draws K and takes two logarithms of each)
    v = jax.random.uniform(k_cls, (batch_size,), dtype=arrays.support_cdf.dtype)
    cdf = jnp.cumsum(arrays.class_probs)[:-1]
    cls = jnp.sum(cdf[None, :] <= v[:, None], axis=1, dtype=jnp.int32)
    u = jax.random.uniform(k_tok, (batch_size, T - 1), dtype=arrays.support_cdf.dtype)
    return cls, u


def _sizes(batch_size, T):
    return check_int("batch_size", batch_size, 1, integral_float=True), check_int("T", T, 2, integral_float=True)


#: tokens per comparison sum of `sample_support_counts(scatter=False)`: the fastest slice on the Fig. 6 sweep
#: (`benchmarks/bench_scan_snap.py`) of 4, 8, 16, 32 and 64 tokens and one sum over all T - 1, chosen with the
#: slices unrolled (the loop over them since compiles shorter; the slice was not chosen again for it)
_COUNT_SLICE = 16


def sample_support_counts(
    arrays: ClassArrays, key: jax.Array, batch_size: int, T: int, *, scatter: bool = True
) -> tuple[jax.Array, jax.Array]:
    """(cls (B,), counts (B, S)): `sample_counts` on the support of each drawn class, entry j counting the
    tokens `arrays.support_index[cls, j]` (padded entries count 0): the same draws, without the (B, M) vector.

    Token t of a sequence is the support entry j with cdf_{j-1} <= u_t < cdf_j, i.e. j = #{k : cdf_k <= u_t}
    (the padded entries, cdf = 1 > u_t, are never hit); N_j counts the tokens with entry j. `scatter`: count
    them by one scatter-add (a single run's program: shorter to compile and faster); else by comparison sums
    over the tokens (a sweep's program, vmapped over its runs: faster there). The same counts either way.
    """
    batch_size, T = _sizes(batch_size, T)
    cls, u = _draw(arrays, key, batch_size, T)
    cdf = arrays.support_cdf[cls]  # (B, S)
    if scatter:
        # support entry of each token, j = #{k : cdf_k <= u_t} (integer sums: a float reduction over (B, T-1, S)
        # is slower on CPU), then one scatter-add of the counts over the support
        j = jnp.sum(cdf[:, None, :] <= u[:, :, None], axis=-1, dtype=jnp.int32)  # (B, T-1)
        rows = jnp.arange(batch_size)[:, None]
        return cls, jnp.zeros(cdf.shape, cdf.dtype).at[rows, j].add(1.0)
    # N_j = #{t : cdf_{j-1} <= u_t < cdf_j} = C_j - C_{j-1} with C_j = #{t : u_t < cdf_j} (C_{-1} = 0): integer
    # comparison sums over the tokens, no scatter (in a sweep's program XLA's CPU scatter-add of every run's
    # tokens one by one was the largest part of the Fig. 6 sweep's small-K steps). Summed over slices of
    # `_COUNT_SLICE` tokens: XLA splits one long sum into a windowed reduction that materialises the whole
    # (B, T-1, S) comparison, slower than the scatter.
    n = -(-u.shape[1] // _COUNT_SLICE)
    u = jnp.pad(u, ((0, 0), (0, n * _COUNT_SLICE - u.shape[1])), constant_values=2.0)  # 2 is below no cdf

    def add_slice(i, below):
        u_i = jax.lax.dynamic_slice_in_dim(u, i * _COUNT_SLICE, _COUNT_SLICE, axis=1)
        return below + jnp.sum(u_i[:, :, None] < cdf[:, None, :], axis=1, dtype=jnp.int32)

    below = jax.lax.fori_loop(0, n, add_slice, jnp.zeros(cdf.shape, jnp.int32))  # (B, S): C_j
    counts = jnp.diff(below, axis=1, prepend=jnp.zeros((batch_size, 1), jnp.int32))
    return cls, counts.astype(cdf.dtype)


def sample_counts(arrays: ClassArrays, key: jax.Array, batch_size: int, T: int) -> tuple[jax.Array, jax.Array]:
    """(cls (B,), counts (B, M)): classes n ~ P(n) and context counts N ~ Multinomial(T-1, P(.|n)): the counts
    of `sample_support_counts` placed into the vocabulary."""
    cls, counts_s = sample_support_counts(arrays, key, batch_size, T)
    rows = jnp.arange(counts_s.shape[0])[:, None]
    M = arrays.cond.shape[1]
    counts = jnp.zeros((counts_s.shape[0], M), counts_s.dtype).at[rows, arrays.support_index[cls]].add(counts_s)
    return cls, counts


def sample_tokens(arrays: ClassArrays, key: jax.Array, batch_size: int, T: int) -> tuple[jax.Array, jax.Array]:
    """(cls (B,), tokens (B, T-1) int): the literal context sequences behind `sample_counts(key)`."""
    batch_size, T = _sizes(batch_size, T)
    cls, u = _draw(arrays, key, batch_size, T)
    cdf = arrays.support_cdf[cls]
    j = jax.vmap(lambda c, uu: jnp.searchsorted(c, uu, side="right"))(cdf, u)
    j = jnp.minimum(j, cdf.shape[1] - 1)
    return cls, jnp.take_along_axis(arrays.support_index[cls], j, axis=1)
