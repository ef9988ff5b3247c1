"""GENERATED FILE: do not edit by hand.

Derivation: derivations.cooccurrence:Cooccurrence3TokenDerivation
System: cooccurrence-3token
Word co-occurrence (Yang et al. 2024), 3-token mean-field reduction of the Gram flow:
G1..G3, S and the 3x3 blocks of A (key row, query column), M_V, M_K, M_Q; random tokens
inert (G = 0, zero key scores, uniform query rows); groups weighted (1/2, 1/6, 1/6, 1/6).
z = -dL/dG and B = -sqrt(m) dL/dA by sympy; Gram pushforward of §3.2.
Equations:
    (40 equations, 303919 characters: print them with `python -m flows derive cooccurrence-3token`)

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
    _x4 = jnp.exp(A22*_x3)
    _x5 = jnp.exp(A32*_x3)
    _x6 = _x4 + _x5
    _x7 = (_x1 + _x6)**(-1.0)
    _x8 = jnp.exp(A23*_x3)
    _x9 = jnp.exp(A33*_x3)
    _x10 = _x1 + _x9
    _x11 = (_x10 + _x8)**(-1.0)
    _x12 = G2*_x4 + G3*_x5
    _x13 = _x12*_x7
    _x14 = G2*_x8
    _x15 = G3*_x9
    _x16 = _x11*(_x14 + _x15)
    _x17 = jnp.exp(_x13 + _x16 + _x2*(G2 + G3))
    _x18 = _x17/(_x17 + 1)
    _x19 = L - 3
    _x20 = _x0*_x19
    _x21 = jnp.exp(A21*_x3)
    _x22 = jnp.exp(A11*_x3)
    _x23 = jnp.exp(A31*_x3)
    _x24 = _x22 + _x23
    _x25 = (_x19 + _x21 + _x24)**(-1.0)
    _x26 = _x21*_x25
    _x27 = jnp.exp(A12*_x3)
    _x28 = (_x19 + _x27 + _x6)**(-1.0)
    _x29 = jnp.exp(A13*_x3)
    _x30 = (_x19 + _x29 + _x8 + _x9)**(-1.0)
    _x31 = G1 + G3
    _x32 = G1*_x22 + G3*_x23
    _x33 = _x25*(G2*_x21 + _x32)
    _x34 = _x28*(G1*_x27 + _x12)
    _x35 = G1*_x29 + _x15
    _x36 = _x30*(_x14 + _x35)
    _x37 = _x20*(G2 + _x31) + _x33 + _x34 + _x36
    _x38 = jnp.exp(-_x37)/(1 + jnp.exp(-_x37))
    _x39 = 3*_x38
    _x40 = _x18*(_x11*_x8 + _x2 + _x4*_x7) - _x39*(_x20 + _x26 + _x28*_x4 + _x30*_x8)
    _x41 = _x40*m1
    _x42 = (_x1 + _x24)**(-1.0)
    _x43 = (_x10 + _x29)**(-1.0)
    _x44 = _x32*_x42
    _x45 = _x35*_x43
    _x46 = jnp.exp(_x2*_x31 + _x44 + _x45)
    _x47 = _x46/(_x46 + 1)
    _x48 = _x27*_x28
    _x49 = -_x39*(_x20 + _x22*_x25 + _x29*_x30 + _x48) + _x47*(_x2 + _x22*_x42 + _x29*_x43)
    _x50 = L - 1
    _x51 = (_x50 + _x9)**(-1.0)
    _x52 = _x51*_x9
    _x53 = _x0*_x50 + _x52
    _x54 = jnp.exp(G3*_x53)
    _x55 = _x54/(_x54 + 1)
    _x56 = _x18*(_x11*_x9 + _x2 + _x5*_x7) - _x39*(_x20 + _x23*_x25 + _x28*_x5 + _x30*_x9) + _x47*(_x2 + _x23*_x42 + _x43*_x9) + _x53*_x55
    _x57 = _x56*m1
    _x58 = _x49*m1
    _x59 = G1*_x49
    _x60 = G2*_x40
    _x61 = G3*_x56
    _x62 = -_x33
    _x63 = _x26*(G2 + _x62)
    _x64 = _x39*_x63
    _x65 = -_x34
    _x66 = _x48*(G1 + _x65)
    _x67 = _x39*_x66
    _x68 = -_x44
    _x69 = _x42*_x47
    _x70 = _x25*_x39
    _x71 = _x22*(_x69*(G1 + _x68) - _x70*(G1 + _x62))
    _x72 = _x23*(_x69*(G3 + _x68) - _x70*(G3 + _x62))
    _x73 = -_x45
    _x74 = _x43*_x47
    _x75 = -_x36
    _x76 = _x30*_x39
    _x77 = _x29*(_x74*(G1 + _x73) - _x76*(G1 + _x75))
    _x78 = (1/6)*_x3
    _x79 = -_x13
    _x80 = _x18*_x7
    _x81 = _x28*_x39
    _x82 = _x4*(_x80*(G2 + _x79) - _x81*(G2 + _x65))
    _x83 = _x5*(_x80*(G3 + _x79) - _x81*(G3 + _x65))
    _x84 = -_x16
    _x85 = _x11*_x18
    _x86 = _x8*(-_x76*(G2 + _x75) + _x85*(G2 + _x84))
    _x87 = _x9*(G3*_x51*_x55*(1 - _x52) + _x74*(G3 + _x73) - _x76*(G3 + _x75) + _x85*(G3 + _x84))
    _x88 = -1/6*G1*_x40 - 1/6*G2*_x49
    _x89 = -1/6*G1*_x56 - 1/6*G3*_x49
    _x90 = -1/6*G2*_x56 - 1/6*G3*_x40
    _x91 = -A12*_x38*_x66
    _x92 = (1/3)*A11*_x71
    _x93 = A13*_x77
    _x94 = -_x78*(-A11*_x64 + A12*_x82 + A13*_x86 + A21*_x71 - A22*_x67 + A23*_x77)
    _x95 = -_x78*(A11*_x72 + A12*_x83 + A13*_x87 + A31*_x71 - A32*_x67 + A33*_x77)
    _x96 = -A21*_x38*_x63
    _x97 = (1/3)*A22*_x82
    _x98 = A23*_x86
    _x99 = -_x78*(A21*_x72 + A22*_x83 + A23*_x87 - A31*_x64 + A32*_x82 + A33*_x86)
    _x100 = A31*_x72
    _x101 = A32*_x83
    _x102 = A33*_x87
    _x103 = (1/3)*_x3
    _x104 = -_x78*(-A11*_x67 + A12*_x71 + A21*_x82 - A22*_x64 + A31*_x83 + A32*_x72)
    _x105 = -_x78*(A11*_x77 + A13*_x71 + A21*_x86 - A23*_x64 + A31*_x87 + A33*_x72)
    _x106 = -_x78*(A12*_x77 - A13*_x67 + A22*_x86 + A23*_x82 + A32*_x87 + A33*_x83)
    return jnp.stack(
        [
            jnp.broadcast_to(-1/6*MV12*_x41 - 1/6*MV13*_x57 - 1/6*_x49*(MV11*m1 + S), y[..., 0].shape),
            jnp.broadcast_to(-1/6*MV21*_x58 - 1/6*MV23*_x57 - 1/6*_x40*(MV22*m1 + S), y[..., 0].shape),
            jnp.broadcast_to(-1/6*MV31*_x58 - 1/6*MV32*_x41 - 1/6*_x56*(MV33*m1 + S), y[..., 0].shape),
            jnp.broadcast_to(-1/3*m1*(_x59 + _x60 + _x61), y[..., 0].shape),
            jnp.broadcast_to(-_x78*(MK11*_x71 - MK12*_x64 + MK13*_x72 + MQ11*_x71 - MQ21*_x67 + MQ31*_x77), y[..., 0].shape),
            jnp.broadcast_to(-_x78*(-MK11*_x67 + MK12*_x82 + MK13*_x83 + MQ12*_x71 - MQ22*_x67 + MQ32*_x77), y[..., 0].shape),
            jnp.broadcast_to(-_x78*(MK11*_x77 + MK12*_x86 + MK13*_x87 + MQ13*_x71 - MQ23*_x67 + MQ33*_x77), y[..., 0].shape),
            jnp.broadcast_to(-_x78*(MK21*_x71 - MK22*_x64 + MK23*_x72 - MQ11*_x64 + MQ21*_x82 + MQ31*_x86), y[..., 0].shape),
            jnp.broadcast_to(-_x78*(-MK21*_x67 + MK22*_x82 + MK23*_x83 - MQ12*_x64 + MQ22*_x82 + MQ32*_x86), y[..., 0].shape),
            jnp.broadcast_to(-_x78*(MK21*_x77 + MK22*_x86 + MK23*_x87 - MQ13*_x64 + MQ23*_x82 + MQ33*_x86), y[..., 0].shape),
            jnp.broadcast_to(-_x78*(MK31*_x71 - MK32*_x64 + MK33*_x72 + MQ11*_x72 + MQ21*_x83 + MQ31*_x87), y[..., 0].shape),
            jnp.broadcast_to(-_x78*(-MK31*_x67 + MK32*_x82 + MK33*_x83 + MQ12*_x72 + MQ22*_x83 + MQ32*_x87), y[..., 0].shape),
            jnp.broadcast_to(-_x78*(MK31*_x77 + MK32*_x86 + MK33*_x87 + MQ13*_x72 + MQ23*_x83 + MQ33*_x87), y[..., 0].shape),
            jnp.broadcast_to(-1/3*_x59, y[..., 0].shape),
            jnp.broadcast_to(_x88, y[..., 0].shape),
            jnp.broadcast_to(_x89, y[..., 0].shape),
            jnp.broadcast_to(_x88, y[..., 0].shape),
            jnp.broadcast_to(-1/3*_x60, y[..., 0].shape),
            jnp.broadcast_to(_x90, y[..., 0].shape),
            jnp.broadcast_to(_x89, y[..., 0].shape),
            jnp.broadcast_to(_x90, y[..., 0].shape),
            jnp.broadcast_to(-1/3*_x61, y[..., 0].shape),
            jnp.broadcast_to(-_x3*(_x91 + _x92 + (1/3)*_x93), y[..., 0].shape),
            jnp.broadcast_to(_x94, y[..., 0].shape),
            jnp.broadcast_to(_x95, y[..., 0].shape),
            jnp.broadcast_to(_x94, y[..., 0].shape),
            jnp.broadcast_to(-_x3*(_x96 + _x97 + (1/3)*_x98), y[..., 0].shape),
            jnp.broadcast_to(_x99, y[..., 0].shape),
            jnp.broadcast_to(_x95, y[..., 0].shape),
            jnp.broadcast_to(_x99, y[..., 0].shape),
            jnp.broadcast_to(-_x103*(_x100 + _x101 + _x102), y[..., 0].shape),
            jnp.broadcast_to(-_x3*((1/3)*_x100 + _x92 + _x96), y[..., 0].shape),
            jnp.broadcast_to(_x104, y[..., 0].shape),
            jnp.broadcast_to(_x105, y[..., 0].shape),
            jnp.broadcast_to(_x104, y[..., 0].shape),
            jnp.broadcast_to(-_x3*((1/3)*_x101 + _x91 + _x97), y[..., 0].shape),
            jnp.broadcast_to(_x106, y[..., 0].shape),
            jnp.broadcast_to(_x105, y[..., 0].shape),
            jnp.broadcast_to(_x106, y[..., 0].shape),
            jnp.broadcast_to(-_x103*(_x102 + _x93 + _x98), y[..., 0].shape),
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
