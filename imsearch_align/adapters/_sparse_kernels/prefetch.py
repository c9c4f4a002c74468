"""A software prefetch for the scatter of the sparse kernels, where the compiler allows one.

:data:`prefetch` is numba's ``llvm.prefetch`` intrinsic when this
numba/llvmlite can compile it, else a no-op that changes no result.
"""

from __future__ import annotations

import numpy as np
from numba import njit, types
from numba.extending import intrinsic

__all__ = ["PREFETCH_AHEAD", "prefetch"]

try:  # llvmlite ships with numba; used only to emit llvm.prefetch
    from llvmlite import ir as _ir
except ImportError:  # pragma: no cover - numba always brings llvmlite
    _ir = None


@intrinsic
def _prefetch_intrinsic(typingctx, arr, idx):
    """``llvm.prefetch`` of ``arr[idx]`` (read, keep in all cache levels)."""
    sig = types.void(arr, idx)

    def codegen(context, builder, signature, args):
        ary = context.make_array(signature.args[0])(context, builder, args[0])
        i8p = _ir.IntType(8).as_pointer()
        i32 = _ir.IntType(32)
        fn = builder.module.declare_intrinsic(
            "llvm.prefetch", fnty=_ir.FunctionType(_ir.VoidType(), [i8p, i32, i32, i32])
        )
        ptr = builder.bitcast(builder.gep(ary.data, [args[1]]), i8p)
        builder.call(fn, [ptr, _ir.Constant(i32, 0), _ir.Constant(i32, 3), _ir.Constant(i32, 1)])
        return context.get_dummy_value()

    return sig, codegen


@njit(nogil=True, cache=True, inline="always")
def _prefetch_noop(arr, idx):
    pass


def _pick_prefetch():
    """The prefetch intrinsic when this numba/llvmlite can compile it, else a no-op.

    Posting lists are short and scattered in memory, so the scatter waits on
    the first cache line of every list; prefetching a few terms ahead hides
    part of that latency (measured: about a third of the scatter time).
    """
    if _ir is None:
        return _prefetch_noop
    try:

        @njit(nogil=True)
        def probe(a):
            _prefetch_intrinsic(a, 0)

        probe(np.zeros(1, np.float32))
    except Exception:  # an llvmlite without this API: correctness does not need it
        return _prefetch_noop
    return _prefetch_intrinsic


#: ``prefetch(arr, idx)``: hint that ``arr[idx]`` is read soon (or a no-op).
prefetch = _pick_prefetch()
#: Terms prefetched ahead of the one being scattered.
PREFETCH_AHEAD = 8
