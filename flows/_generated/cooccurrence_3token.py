"""GENERATED FILE: do not edit by hand.

Derivation: derivations.cooccurrence:Cooccurrence3TokenDerivation
System: cooccurrence-3token
Word co-occurrence (Yang et al. 2024), 3-token mean-field reduction of the Gram flow:
G1..G3, S and the 3x3 blocks of A (key row, query column), M_V, M_K, M_Q; random tokens
inert (G = 0, zero key scores, uniform query rows); groups weighted (1/2, 1/6, 1/6, 1/6).
z = -dL/dG and B = -sqrt(m) dL/dA by sympy; the Gram flow of cooccurrence-gram at d = 3.
Equations:
    (40 equations, 310026 characters: print them with `python -m flows derive cooccurrence-3token`)

Re-generate with `python -m derivations --write`; a test fails when this file is out of date.
"""

import jax.numpy as jnp

from flows._generated import _runtime

STATE = ('G1', 'G2', 'G3', 'S', 'A11', 'A12', 'A13', 'A21', 'A22', 'A23', 'A31', 'A32', 'A33', 'MV11', 'MV12', 'MV13', 'MV21', 'MV22', 'MV23', 'MV31', 'MV32', 'MV33', 'MK11', 'MK12', 'MK13', 'MK21', 'MK22', 'MK23', 'MK31', 'MK32', 'MK33', 'MQ11', 'MQ12', 'MQ13', 'MQ21', 'MQ22', 'MQ23', 'MQ31', 'MQ32', 'MQ33')
PARAMS = ('m', 'm1', 'L')
SYSTEM = 'cooccurrence-3token'


def vector_field(t, y, args):
    """d(G1, G2, G3, S, A11, A12, A13, A21, A22, A23, A31, A32, A33, MV11, MV12, MV13, MV21, MV22, MV23, MV31, MV32, MV33, MK11, MK12, MK13, MK21, MK22, MK23, MK31, MK32, MK33, MQ11, MQ12, MQ13, MQ21, MQ22, MQ23, MQ31, MQ32, MQ33)/dt for state `y[..., i]` in STATE order and
    `args` a mapping with exactly the keys in PARAMS (others are a ValueError); broadcasts over leading
    axes."""
    _runtime.check_args(args, PARAMS, SYSTEM)
    G1 = y[..., 0]
    G2 = y[..., 1]
    G3 = y[..., 2]
    S = y[..., 3]
    A11 = y[..., 4]
    A12 = y[..., 5]
    A13 = y[..., 6]
    A21 = y[..., 7]
    A22 = y[..., 8]
    A23 = y[..., 9]
    A31 = y[..., 10]
    A32 = y[..., 11]
    A33 = y[..., 12]
    MV11 = y[..., 13]
    MV12 = y[..., 14]
    MV13 = y[..., 15]
    MV21 = y[..., 16]
    MV22 = y[..., 17]
    MV23 = y[..., 18]
    MV31 = y[..., 19]
    MV32 = y[..., 20]
    MV33 = y[..., 21]
    MK11 = y[..., 22]
    MK12 = y[..., 23]
    MK13 = y[..., 24]
    MK21 = y[..., 25]
    MK22 = y[..., 26]
    MK23 = y[..., 27]
    MK31 = y[..., 28]
    MK32 = y[..., 29]
    MK33 = y[..., 30]
    MQ11 = y[..., 31]
    MQ12 = y[..., 32]
    MQ13 = y[..., 33]
    MQ21 = y[..., 34]
    MQ22 = y[..., 35]
    MQ23 = y[..., 36]
    MQ31 = y[..., 37]
    MQ32 = y[..., 38]
    MQ33 = y[..., 39]
    m = args['m']
    m1 = args['m1']
    L = args['L']
    _x0 = L**(-1.0)
    _x1 = L - 2
    _x2 = _x0*_x1
    _x3 = 1/jnp.sqrt(m)
    _x4 = jnp.exp(A11*_x3)
    _x5 = jnp.exp(A31*_x3)
    _x6 = _x4 + _x5
    _x7 = (_x1 + _x6)**(-1.0)
    _x8 = jnp.exp(A13*_x3)
    _x9 = jnp.exp(A33*_x3)
    _x10 = _x1 + _x9
    _x11 = (_x10 + _x8)**(-1.0)
    _x12 = G1 + G3
    _x13 = G1*_x4 + G3*_x5
    _x14 = _x13*_x7
    _x15 = G3*_x9
    _x16 = G1*_x8 + _x15
    _x17 = _x11*_x16
    _x18 = jnp.exp(_x12*_x2 + _x14 + _x17)
    _x19 = _x18/(_x18 + 1)
    _x20 = L - 3
    _x21 = _x0*_x20
    _x22 = jnp.exp(A21*_x3)
    _x23 = (_x20 + _x22 + _x6)**(-1.0)
    _x24 = jnp.exp(A12*_x3)
    _x25 = jnp.exp(A22*_x3)
    _x26 = jnp.exp(A32*_x3)
    _x27 = _x25 + _x26
    _x28 = (_x20 + _x24 + _x27)**(-1.0)
    _x29 = _x24*_x28
    _x30 = jnp.exp(A23*_x3)
    _x31 = (_x20 + _x30 + _x8 + _x9)**(-1.0)
    _x32 = _x23*(G2*_x22 + _x13)
    _x33 = G2*_x25 + G3*_x26
    _x34 = _x28*(G1*_x24 + _x33)
    _x35 = G2*_x30
    _x36 = _x31*(_x16 + _x35)
    _x37 = _x21*(G2 + _x12) + _x32 + _x34 + _x36
    _x38 = 3*jnp.exp(-_x37)/(1 + jnp.exp(-_x37))
    _x39 = _x19*(_x11*_x8 + _x2 + _x4*_x7) - _x38*(_x21 + _x23*_x4 + _x29 + _x31*_x8)
    _x40 = (_x1 + _x27)**(-1.0)
    _x41 = (_x10 + _x30)**(-1.0)
    _x42 = _x33*_x40
    _x43 = _x41*(_x15 + _x35)
    _x44 = jnp.exp(_x2*(G2 + G3) + _x42 + _x43)
    _x45 = _x44/(_x44 + 1)
    _x46 = _x22*_x23
    _x47 = -_x38*(_x21 + _x25*_x28 + _x30*_x31 + _x46) + _x45*(_x2 + _x25*_x40 + _x30*_x41)
    _x48 = L - 1
    _x49 = (_x48 + _x9)**(-1.0)
    _x50 = _x49*_x9
    _x51 = _x0*_x48 + _x50
    _x52 = jnp.exp(G3*_x51)
    _x53 = _x52/(_x52 + 1)
    _x54 = _x19*(_x11*_x9 + _x2 + _x5*_x7) - _x38*(_x21 + _x23*_x5 + _x26*_x28 + _x31*_x9) + _x45*(_x2 + _x26*_x40 + _x41*_x9) + _x51*_x53
    _x55 = -_x39
    _x56 = -_x47
    _x57 = G1*_x39
    _x58 = G2*_x47
    _x59 = G3*_x54
    _x60 = -_x32
    _x61 = _x38*_x46*(G2 + _x60)
    _x62 = -_x34
    _x63 = _x29*_x38*(G1 + _x62)
    _x64 = -_x14
    _x65 = _x19*_x7
    _x66 = _x23*_x38
    _x67 = _x4*(_x65*(G1 + _x64) - _x66*(G1 + _x60))
    _x68 = _x5*(_x65*(G3 + _x64) - _x66*(G3 + _x60))
    _x69 = -_x17
    _x70 = _x11*_x19
    _x71 = -_x36
    _x72 = _x31*_x38
    _x73 = _x8*(_x70*(G1 + _x69) - _x72*(G1 + _x71))
    _x74 = (1/6)*_x3
    _x75 = -_x42
    _x76 = _x40*_x45
    _x77 = _x28*_x38
    _x78 = _x25*(_x76*(G2 + _x75) - _x77*(G2 + _x62))
    _x79 = _x26*(_x76*(G3 + _x75) - _x77*(G3 + _x62))
    _x80 = -_x43
    _x81 = _x41*_x45
    _x82 = _x30*(-_x72*(G2 + _x71) + _x81*(G2 + _x80))
    _x83 = _x9*(G3*_x49*_x53*(1 - _x50) + _x70*(G3 + _x69) - _x72*(G3 + _x71) + _x81*(G3 + _x80))
    _x84 = -1/6*G1*_x47 - 1/6*G2*_x39
    _x85 = -1/6*G1*_x54 + (1/6)*G3*_x55
    _x86 = -1/6*G2*_x54 + (1/6)*G3*_x56
    _x87 = -A12*_x63
    _x88 = A11*_x67
    _x89 = A13*_x73
    _x90 = (1/3)*_x3
    _x91 = -_x74*(-A11*_x61 + A12*_x78 + A13*_x82 + A21*_x67 - A22*_x63 + A23*_x73)
    _x92 = -_x74*(A11*_x68 + A12*_x79 + A13*_x83 + A31*_x67 - A32*_x63 + A33*_x73)
    _x93 = -A21*_x61
    _x94 = A22*_x78
    _x95 = A23*_x82
    _x96 = -_x74*(A21*_x68 + A22*_x79 + A23*_x83 - A31*_x61 + A32*_x78 + A33*_x82)
    _x97 = A31*_x68
    _x98 = A32*_x79
    _x99 = A33*_x83
    _x100 = -_x74*(-A11*_x63 + A12*_x67 + A21*_x78 - A22*_x61 + A31*_x79 + A32*_x68)
    _x101 = -_x74*(A11*_x73 + A13*_x67 + A21*_x82 - A23*_x61 + A31*_x83 + A33*_x68)
    _x102 = -_x74*(A12*_x73 - A13*_x63 + A22*_x82 + A23*_x78 + A32*_x83 + A33*_x79)
    return jnp.stack(
        [
            jnp.broadcast_to(-1/6*S*_x39 - 1/6*m1*(MV11*_x39 + MV12*_x47 + MV13*_x54), y[..., 0].shape),
            jnp.broadcast_to(-1/6*S*_x47 - 1/6*m1*(MV21*_x39 + MV22*_x47 + MV23*_x54), y[..., 0].shape),
            jnp.broadcast_to(-1/6*S*_x54 + (1/6)*m1*(MV31*_x55 + MV32*_x56 - MV33*_x54), y[..., 0].shape),
            jnp.broadcast_to(-1/3*m1*(_x57 + _x58 + _x59), y[..., 0].shape),
            jnp.broadcast_to(-_x74*(MK11*_x67 - MK12*_x61 + MK13*_x68 + MQ11*_x67 - MQ21*_x63 + MQ31*_x73), y[..., 0].shape),
            jnp.broadcast_to(-_x74*(-MK11*_x63 + MK12*_x78 + MK13*_x79 + MQ12*_x67 - MQ22*_x63 + MQ32*_x73), y[..., 0].shape),
            jnp.broadcast_to(-_x74*(MK11*_x73 + MK12*_x82 + MK13*_x83 + MQ13*_x67 - MQ23*_x63 + MQ33*_x73), y[..., 0].shape),
            jnp.broadcast_to(-_x74*(MK21*_x67 - MK22*_x61 + MK23*_x68 - MQ11*_x61 + MQ21*_x78 + MQ31*_x82), y[..., 0].shape),
            jnp.broadcast_to(-_x74*(-MK21*_x63 + MK22*_x78 + MK23*_x79 - MQ12*_x61 + MQ22*_x78 + MQ32*_x82), y[..., 0].shape),
            jnp.broadcast_to(-_x74*(MK21*_x73 + MK22*_x82 + MK23*_x83 - MQ13*_x61 + MQ23*_x78 + MQ33*_x82), y[..., 0].shape),
            jnp.broadcast_to(-_x74*(MK31*_x67 - MK32*_x61 + MK33*_x68 + MQ11*_x68 + MQ21*_x79 + MQ31*_x83), y[..., 0].shape),
            jnp.broadcast_to(-_x74*(-MK31*_x63 + MK32*_x78 + MK33*_x79 + MQ12*_x68 + MQ22*_x79 + MQ32*_x83), y[..., 0].shape),
            jnp.broadcast_to(-_x74*(MK31*_x73 + MK32*_x82 + MK33*_x83 + MQ13*_x68 + MQ23*_x79 + MQ33*_x83), y[..., 0].shape),
            jnp.broadcast_to(-1/3*_x57, y[..., 0].shape),
            jnp.broadcast_to(_x84, y[..., 0].shape),
            jnp.broadcast_to(_x85, y[..., 0].shape),
            jnp.broadcast_to(_x84, y[..., 0].shape),
            jnp.broadcast_to(-1/3*_x58, y[..., 0].shape),
            jnp.broadcast_to(_x86, y[..., 0].shape),
            jnp.broadcast_to(_x85, y[..., 0].shape),
            jnp.broadcast_to(_x86, y[..., 0].shape),
            jnp.broadcast_to(-1/3*_x59, y[..., 0].shape),
            jnp.broadcast_to(-_x90*(_x87 + _x88 + _x89), y[..., 0].shape),
            jnp.broadcast_to(_x91, y[..., 0].shape),
            jnp.broadcast_to(_x92, y[..., 0].shape),
            jnp.broadcast_to(_x91, y[..., 0].shape),
            jnp.broadcast_to(-_x90*(_x93 + _x94 + _x95), y[..., 0].shape),
            jnp.broadcast_to(_x96, y[..., 0].shape),
            jnp.broadcast_to(_x92, y[..., 0].shape),
            jnp.broadcast_to(_x96, y[..., 0].shape),
            jnp.broadcast_to(-_x90*(_x97 + _x98 + _x99), y[..., 0].shape),
            jnp.broadcast_to(-_x90*(_x88 + _x93 + _x97), y[..., 0].shape),
            jnp.broadcast_to(_x100, y[..., 0].shape),
            jnp.broadcast_to(_x101, y[..., 0].shape),
            jnp.broadcast_to(_x100, y[..., 0].shape),
            jnp.broadcast_to(-_x90*(_x87 + _x94 + _x98), y[..., 0].shape),
            jnp.broadcast_to(_x102, y[..., 0].shape),
            jnp.broadcast_to(_x101, y[..., 0].shape),
            jnp.broadcast_to(_x102, y[..., 0].shape),
            jnp.broadcast_to(-_x90*(_x89 + _x95 + _x99), y[..., 0].shape),
        ],
        axis=-1,
    )


def pack_state(values, dtype=None):
    """The state `y` (e.g. `y0` for `flows.solve`) whose last axis holds `values[name]` for every name in
    STATE, in that order; arrays broadcast (shape `s` gives states of shape `s + (len(STATE),)`)."""
    return _runtime.pack_state(values, STATE, SYSTEM, dtype)


def unpack_state(ys):
    """`{name: ys[..., i]}` for every name in STATE: `ys` one state, saved states or a `flows.Trajectory`."""
    return _runtime.unpack_state(ys, STATE)
