"""The attention chain torch's frontend writes, rewritten as one ``relax.nn.attention``
(``attention_bias`` where the chain adds a bias).

Where it sits: an inference rewrite (`prepare_for_inference`), after constant masks are folded
and broadcasts into matmuls dropped. A model that writes attention without SDPA
(transformers' eager attention), and SDPA with a mask (which torch.export decomposes), reach
Relax as a chain in BHSD layout (batch, heads, sequence, head dim):

    scores = matmul(Q, permute_dims(K, [0, 1, 3, 2]))      batch and heads merged by reshapes
    scores = scores * c  (or / c; or Q and K^T each scaled)
    scores = scores + M                                     a mask or a bias, optional
    P = softmax(scores, axis=-1)                            then astype to 16 bits, optional
    P = where(row has no key, 0, P)                         SDPA's guard, optional
    O = matmul(P, V)

which is ``relax.nn.attention`` (BSNH) of the same Q, K and V, so `simaccel.attention` runs it
in one kernel that never stores the scores. The rewrite gives that op the chain's operands,
each permuted to BSNH (a permute_dims right before it is composed with that one, so the
frontend's own BSNH -> BHSD permute and ours cancel), and permutes the result back:

* a constant mask that is 0 where a query row sees a key and at most float16's lowest value
  (-65504) or -inf elsewhere, in the same pattern for every batch and head, that pattern being
  no mask, causal TopLeft (key j for query i where j <= i) or BottomRight (j <= i + |S - T|),
  becomes the op's causal mask. A finite mask value stands for -inf: exp(score + mask - max)
  is 0 in float32 wherever the row's largest seen score exceeds that masked score by less
  than 65000, which holds for any score a 16-bit model can produce;
* any other M (a padding mask given as an input, a sliding window, a constant of any other
  pattern) is the op's bias: ``relax.nn.attention_bias`` (`simaccel.attention_bias`), which
  adds it to the scaled scores in float32, as the chain does. It is read in float32 or the
  operands' dtype (before an astype of such data to float32: the same values), made 4-D
  with leading dims of 1; M added to scores whose batch and heads are merged ((B H, S, T)) is
  taken only where it is at most 2-D (a broadcast over those dims alone);
* Q, K and V are the same dtype, read before any astype to float32 the chain applied to all
  three (SDPA's decomposition computes 16-bit attention in float32); the result is cast to
  the chain's dtype. Where the chain widens some of them and finds the others float32
  already (TVM's torch frontend keeps a 16-bit linear layer's float32 result: Qwen3's values
  beside its normed 16-bit queries and keys), the op computes in float32 on the values the
  chain computes on, the widened ones cast again. The fused kernel computes in float32 and rounds once to the operands'
  dtype (16-bit chains: the weights are rounded to 16 bits before P V, as the eager chain's
  own astype does);
* keys and values repeated per query-head group as transformers' ``repeat_kv`` writes them
  (expand_dims at axis 2, broadcast_to, reshape: key/value head j serves query heads j G ..
  j G + G - 1) are read unrepeated, through ``R.repeat`` along the head axis, which
  `simaccel.grouped_attention` folds: the repeat is never computed;
* the accelerator must take the attention op made (the caller's `takes`, asked about a
  module of that op alone: the backend partitions it with the active profile, so every check
  a real match meets applies; simaccel.attention's head dims are at most 256, say), so that
  it never lands on TVM's own legalization of relax.nn.attention instead of the chain.

What does not qualify (softmax over another axis, a scale that is a tensor, a bias of
another dtype) stays the chain it was, offloaded op by op. A row whose every score is -inf
(a bias hiding every key) gives 0, as SDPA's guard gives; an eager chain without that guard
gives NaN there.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import tvm
import tvm_ffi
from tvm import relax
from tvm.relax.dpl import is_op, rewrite_call, wildcard

from .types import relax_dims, tensor_info

MASKED = -65504.0  # float16's lowest: a mask value at or below it hides its key (module doc)
WIDE = ("float16", "bfloat16")  # operand dtypes the chain may widen to float32 before its matmuls
BSNH = [0, 2, 1, 3]  # BHSD <-> BSNH (its own inverse)


@dataclasses.dataclass
class _Operand:
    """A chain operand traced back to its 4-D BHSD tensor."""
    tensor: relax.Expr
    widened: bool = False  # read through an astype of 16-bit data to float32
    group: int = 1  # each key/value head repeated this many times along the head axis (repeat_kv)
    scale: float = 1.0  # the constants it was multiplied by on its way to the matmul


def fuse_attention_chains(func: relax.Function, takes) -> tuple[relax.Function, int]:
    """`func` with each qualifying attention chain (module doc) rewritten; the count.
    `takes(probe)`: whether the accelerator runs what `probe` computes, a module of the
    relax.nn.attention that would replace a chain (`_probe`)."""
    bound = relax.analysis.get_var2val(func)
    bounds = {k: v for k, v in (func.attrs or {}).items() if k in ("tir_var_lower_bound", "tir_var_upper_bound")}
    # Keyed by the node's handle (hash), not by the node: `==` of vars builds an expression
    users: dict = {}  # var -> the calls that read it
    for value in bound.values():
        for arg in value.args if isinstance(value, relax.Call) else ():
            if isinstance(arg, relax.Var):
                users.setdefault(hash(arg), []).append(value)
    var_of = {hash(value): var for var, value in bound.items()}
    count = 0
    p, v = wildcard(), wildcard()
    final = is_op("relax.matmul")(p, v)

    def rewrite(expr, matches):
        nonlocal count
        fused = _fuse(matches[final], bound, lambda call: _rounded_to(call, var_of, users), takes, bounds)
        if fused is None:
            return expr
        count += 1
        return fused

    func = rewrite_call(final, rewrite, func)
    return func, count


def _value(expr, bound):
    """The call a var is bound to (the expression itself where it is not a bound var)."""
    return bound.get(expr, expr) if isinstance(expr, relax.Var) else expr


def _call(expr, bound, *names):
    """The call `expr` is (through its var), if it is one of the ops `names`, else None."""
    value = _value(expr, bound)
    if isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op) and value.op.name in names:
        return value
    return None


def _scalar(expr) -> float | None:
    """The value of a one-element float constant."""
    if not isinstance(expr, tvm.ir.GenericConst):
        return None
    value = expr.value.numpy()
    if value.size != 1 or value.dtype.kind != "f" or not np.isfinite(value).all():
        return None
    return float(value.reshape(()))


def _scaled(expr, bound) -> tuple[relax.Expr, float] | None:
    """(x, c) where `expr` is x * c, c * x or x / c of a finite scalar constant c, else None."""
    call = _call(expr, bound, "relax.multiply", "relax.divide")
    if call is None:
        return None
    x, y = call.args
    c = _scalar(_value(y, bound))
    if call.op.name == "relax.multiply" and c is None:
        x, c = y, _scalar(_value(x, bound))
    if c is None or (call.op.name == "relax.divide" and c == 0.0):
        return None
    return x, (c if call.op.name == "relax.multiply" else 1.0 / c)


def _unreshaped(expr, bound):
    """`expr` with the reshapes that only regroup its leading dims (batch and heads; the last
    two, a matrix, kept: so the flat order of every matrix is the same) and the astypes to its
    own dtype that produced it peeled off."""
    while (inner := _view_of(expr, bound)) is not None:
        expr = inner
    return expr


def _view_of(expr, bound):
    """What `expr` is a view of: the argument of a reshape that only regroups leading dims, or
    of an astype to its own dtype; None where it is neither."""
    call = _call(expr, bound, "relax.reshape", "relax.astype")
    if call is None:
        return None
    if call.op.name == "relax.astype":
        return call.args[0] if str(call.attrs.dtype) == tensor_info(call.args[0])[1] else None
    before, after = relax_dims(call.args[0]), relax_dims(call)
    if before is None or after is None or len(before) < 2 or len(after) < 2 or \
            not all(tvm_ffi.structural_equal(a, b) for a, b in zip(before[-2:], after[-2:])):
        return None
    return call.args[0]


def _widened(expr, bound):
    """x where `expr` is an astype of 16-bit x to float32, else None."""
    call = _call(expr, bound, "relax.astype")
    if call is not None and str(call.attrs.dtype) == "float32" and tensor_info(call.args[0])[1] in WIDE:
        return call.args[0]
    return None


def _operand(expr, bound, *, scaled: bool, transposed: bool) -> _Operand | None:
    """Trace a matmul operand back to its 4-D BHSD tensor through reshapes, scalar scales (Q's
    and K's: `scaled`), one permute_dims swapping the last two axes (K^T:
    `transposed`), an astype of 16-bit data to float32, and repeat_kv's expand. Where the trace
    ends in a tensor that is not 4-D (nn.MultiheadAttention's heads are merged with the batch
    before the chain: (B H, S, D)), the operand is the deepest 4-D view of it the chain took."""
    factor, swapped, widened = 1.0, False, False
    deepest = None  # (expr, factor, swapped, widened) at the deepest 4-D expression seen
    while True:
        dims = relax_dims(expr)
        if dims is not None and len(dims) == 4:
            deepest = (expr, factor, swapped, widened)
        if (inner := _view_of(expr, bound)) is not None:
            expr = inner
            continue
        if scaled and (found := _scaled(expr, bound)) is not None:
            expr, c = found
            factor *= c
            continue
        call = _call(expr, bound, "relax.permute_dims")
        if transposed and not swapped and call is not None and call.attrs.axes is not None and \
                [int(a) for a in call.attrs.axes] == [0, 1, 3, 2]:
            expr, swapped = call.args[0], True
            continue
        if not widened and (inner := _widened(expr, bound)) is not None:
            expr, widened = inner, True
            continue
        break
    group = 1
    broadcast = _call(expr, bound, "relax.broadcast_to")  # repeat_kv: broadcast_to(expand_dims(x, 2), (B, HKV, G, T, D))
    if broadcast is not None:
        dims = relax_dims(broadcast)
        if dims is None or len(dims) != 5 or not hasattr(dims[2], "value"):
            return None
        expr, group = broadcast.args[0], int(dims[2].value)
    expand = _call(expr, bound, "relax.expand_dims")  # (its broadcast is dropped where G is 1)
    if expand is not None:
        source, dims = relax_dims(expand.args[0]), relax_dims(broadcast if broadcast is not None else expand)
        if [int(a) for a in expand.attrs.axis] != [2] or source is None or len(source) != 4 or \
                not all(tvm_ffi.structural_equal(a, b) for a, b in zip(source, dims[:2] + dims[3:])):
            return None  # not a new group axis, or the broadcast widens more than it
        expr = expand.args[0]
        if not widened and (inner := _widened(expr, bound)) is not None:  # an astype may come before the repeat
            expr, widened = inner, True
    elif broadcast is not None:
        return None
    dims = relax_dims(expr)
    if dims is None or len(dims) != 4:
        if deepest is None or group != 1:
            return None
        expr, factor, swapped, widened = deepest
    if transposed != swapped:
        return None
    return _Operand(expr, widened, group, factor)


def _probabilities(expr, bound) -> relax.Call | None:
    """The softmax call behind the last matmul's left operand: through reshapes, an astype
    (the weights rounded to 16 bits) and SDPA's guard for rows with no key."""
    guarded = False
    while True:
        expr = _unreshaped(expr, bound)
        call = _call(expr, bound, "relax.astype")
        if call is not None and str(call.attrs.dtype) in ("float32", *WIDE):  # the weights rounded (and widened)
            expr = call.args[0]
            continue
        where = _call(expr, bound, "relax.where")
        if where is not None and guarded is False and (guarded := _no_key_guard(where, bound)) is not None:
            expr = where.args[2]
            continue
        break
    softmax = _call(expr, bound, "relax.nn.softmax")
    if softmax is None or guarded not in (False, None) and not guarded.same_as(softmax.args[0]):
        return None  # the guard must test the scores this softmax reads
    rank = len(relax_dims(softmax) or [])
    if int(softmax.attrs.axis) % max(rank, 1) != rank - 1:
        return None
    return softmax


def _no_key_guard(where: relax.Call, bound) -> relax.Expr | None:
    """The scores X where `where` is SDPA's `where(not any(X != -inf, -1), 0, P)` (rows whose
    every score is -inf give 0, as simaccel.attention gives for a row that sees no key), else None."""
    condition, zeros, _ = where.args
    rank = len(relax_dims(where) or [])
    fill = _call(zeros, bound, "relax.full_like", "relax.zeros_like")
    if fill is None and _scalar(zeros) != 0.0:
        return None
    if fill is not None and fill.op.name == "relax.full_like" and _scalar(fill.args[1]) != 0.0:
        return None
    expr = condition
    for name in ("relax.logical_not", "relax.astype", "relax.max", "relax.astype", "relax.logical_not", "relax.equal"):
        call = _call(expr, bound, name)
        if call is None or name == "relax.max" and [int(a) for a in call.attrs.axis or []] not in ([-1], [rank - 1]):
            return None  # "any" over the keys (the last axis) only
        expr = call.args[0]
    low = call.args[1]
    if not (isinstance(low, tvm.ir.GenericConst) and low.value.numpy().size == 1 and np.isneginf(low.value.numpy()).all()):
        return None
    return expr


def _causal(mask: np.ndarray, s: int, t: int) -> str | None | bool:
    """The mask's pattern: None (no mask), "TopLeft" or "BottomRight"; False where it is neither."""
    if mask.ndim < 2 or mask.shape[-2:] != (s, t):
        return False
    rows = mask.reshape(-1, s, t)
    if not (rows == rows[:1]).all():
        return False
    plane = rows[0].astype(np.float64)
    seen = plane == 0
    if not (seen | (plane <= MASKED)).all():
        return False
    if seen.all():
        return None
    i, j = np.arange(s)[:, None], np.arange(t)[None, :]
    for name, offset in (("TopLeft", 0), ("BottomRight", abs(s - t))):
        if (seen == (j <= i + offset)).all():
            return name
    return False


def _rounded_to(call: relax.Call, var_of: dict, users: dict) -> str | None:
    """The dtype `call`'s result is cast to by its one reader (through reshapes and astypes to
    the same dtype), if that reader is an astype; else None."""
    while (var := var_of.get(hash(call))) is not None and len(users.get(hash(var), ())) == 1:
        call = users[hash(var)][0]
        if call.op.name == "relax.astype" and str(call.attrs.dtype) != tensor_info(call.args[0])[1]:
            return str(call.attrs.dtype)
        if call.op.name not in ("relax.reshape", "relax.astype"):
            return None
    return None


def _fuse(final: relax.Call, bound, rounded_to, takes, bounds: dict) -> relax.Expr | None:
    """The replacement of the chain ending at `final` (the matmul of P and V), or None.
    `rounded_to(final)`: the dtype the chain's result is cast to next, if any; `bounds`: the
    function's size-var bound attributes."""
    softmax = _probabilities(final.args[0], bound)
    if softmax is None:
        return None
    scores = _unreshaped(softmax.args[0], bound)
    added = None  # what the chain adds to its scores: a mask, or a bias
    add = _call(scores, bound, "relax.add")
    if add is not None:
        scores, added = add.args
        if isinstance(_value(scores, bound), tvm.ir.GenericConst):
            scores, added = added, scores
        if len(relax_dims(add) or []) != 4 and len(relax_dims(added) or []) > 2:
            return None  # added to scores whose batch and heads are merged: its broadcast is not the op's
    scale = 1.0
    while (found := _scaled(_unreshaped(scores, bound), bound)) is not None:
        scores, c = found
        scale *= c
    product = _call(_unreshaped(scores, bound), bound, "relax.matmul")
    if product is None:
        return None
    q = _operand(product.args[0], bound, scaled=True, transposed=False)
    k = _operand(product.args[1], bound, scaled=True, transposed=True)
    v = _operand(final.args[1], bound, scaled=False, transposed=False)
    if q is None or k is None or v is None or q.group != 1 or k.group != v.group:
        return None
    scale *= q.scale * k.scale
    if not q.widened == k.widened == v.widened:  # some operands float32 already: the op computes on the chain's values
        q, k, v = (_in_float32(x) for x in (q, k, v))
    dtypes = {tensor_info(x.tensor)[1] for x in (q, k, v)}
    qd, kd, vd = (relax_dims(x.tensor) for x in (q, k, v))
    dtype = dtypes.pop() if len(dtypes) == 1 else None
    if dtype not in ("float32", *WIDE) or not _same_chain_shape(final, qd, vd, k.group, kd):
        return None
    if dtype != str(final.ty.dtype) and rounded_to(final) != dtype:
        return None  # 16-bit operands, a float32 result the model keeps: the op would round it to 16 bits
    causal, bias = None, None
    if added is not None:
        constant = _value(added, bound)
        causal = False
        if isinstance(constant, tvm.ir.GenericConst) and hasattr(qd[2], "value") and hasattr(kd[2], "value"):
            causal = _causal(constant.value.numpy(), int(qd[2].value), int(kd[2].value))
        if causal is False:  # computed, or a constant of no causal pattern: the op adds it
            causal, bias = None, _bias(added, bound, dtype)
            if bias is None:
                return None
    operands = [_permuted(x.tensor, bound) for x in (q, k, v)]
    scale = tvm.tirx.FloatImm("float32", scale)
    try:
        probe = _probe(operands, k.group, scale, causal, bounds, bias)
    except Exception:  # noqa: BLE001 - Relax refuses the operands (its own shape rules): the chain stays
        return None
    if not takes(probe):
        return None
    query, key, value = operands
    if k.group > 1:
        key, value = (relax.op.repeat(x, k.group, axis=2) for x in (key, value))
    out = relax.op.nn.attention(query, key, value, bias=bias, scale=scale, causal_mask=causal)
    out = relax.op.permute_dims(out, BSNH)
    if dtype != str(final.ty.dtype):
        out = relax.op.astype(out, str(final.ty.dtype))
    return relax.op.reshape(out, relax_dims(final))


def _in_float32(x: _Operand) -> _Operand:
    """`x` as the float32 values the chain computes on: a widened operand's astype, made again
    from its tensor (unrepeated, before the chain's permutes)."""
    if not x.widened:
        return x
    return dataclasses.replace(x, tensor=relax.BlockBuilder().normalize(relax.op.astype(x.tensor, "float32")), widened=False)


def _bias(added: relax.Expr, bound, dtype: str) -> relax.Expr | None:
    """What the chain adds to its scores, as attention's bias (which takes float32 or the
    operands' `dtype`): read before an astype of `dtype` data to float32 (the same values), 4-D
    (leading dims of 1 added); None where it is neither dtype or of rank over 4."""
    if (inner := _widened(added, bound)) is not None and tensor_info(inner)[1] == dtype:
        added = inner
    dims = relax_dims(added)
    if tensor_info(added)[1] not in (dtype, "float32") or dims is None or len(dims) > 4:
        return None
    return added if len(dims) == 4 else relax.op.reshape(added, [1] * (4 - len(dims)) + list(dims))


def _probe(operands: list, group: int, scale, causal, bounds: dict, bias=None) -> tvm.IRModule:
    """A module whose one function computes, from stand-ins of the chain's operands (BSNH, their
    types as Relax gives them) and its bias, the attention that would replace the chain, its
    keys and values repeated per group where the chain repeated them: what `takes` is asked
    about. It carries the chain's function's size bounds."""
    params = [relax.Var(role, _typed(x).ty) for role, x in zip(("query", "key", "value"), operands)]
    if bias is not None:
        params.append(relax.Var("bias", _typed(bias).ty))
    bb = relax.BlockBuilder()
    with bb.function("main", params, attrs=bounds):
        with bb.dataflow():
            query, key, value, *given = params
            if group > 1:
                key, value = (bb.emit(relax.op.repeat(x, group, axis=2)) for x in (key, value))
            out = bb.emit_output(relax.op.nn.attention(query, key, value, bias=given[0] if given else None,
                                                       scale=scale, causal_mask=causal))
        bb.emit_func_output(out)
    return bb.get()


def _typed(expr: relax.Expr) -> relax.Expr:
    """`expr` (a var, or calls of calls of vars) with its type: each call typed by Relax on
    stand-ins of its typed arguments."""
    if not isinstance(expr, relax.Call):
        return expr
    stand_ins = [relax.Var(f"arg{i}", _typed(a).ty) if isinstance(a, relax.Call) else a for i, a in enumerate(expr.args)]
    return relax.BlockBuilder().normalize(relax.Call(expr.op, stand_ins, expr.attrs))


def _permuted(x: relax.Expr, bound) -> relax.Expr:
    """x (BHSD) permuted to BSNH, composed with a permute_dims that made x (the frontend's own
    BSNH -> BHSD one cancels: no copy)."""
    inner = _call(x, bound, "relax.permute_dims")
    if inner is not None and inner.attrs.axes is not None:
        axes = [int(inner.attrs.axes[a]) for a in BSNH]
        return inner.args[0] if axes == list(range(4)) else relax.op.permute_dims(inner.args[0], axes)
    return relax.op.permute_dims(x, BSNH)


def _same_chain_shape(final: relax.Call, q: list, v: list, group: int, k: list) -> bool:
    """Whether the shapes are attention's: Q (B, H, S, D), K (B, H / G, T, D), V (B, H / G, T,
    Dv), and the last matmul's result (B * H, S, Dv) or (B, H, S, Dv)."""
    from tvm.sym.analyzer import Analyzer

    same = Analyzer().can_prove_equal
    out = relax_dims(final)
    if out is None or len(out) not in (3, 4):
        return False
    lead = out[0] if len(out) == 3 else out[0] * out[1]
    if len(out) == 4 and not (same(out[0], q[0]) and same(out[1], q[1])):
        return False
    return bool(same(q[0], k[0]) and same(q[0], v[0]) and same(q[1], k[1] * group) and same(k[1], v[1])
                and same(k[2], v[2]) and same(q[3], k[3]) and same(lead, q[0] * q[1]) and same(out[-2], q[2])
                and same(out[-1], v[3]))
