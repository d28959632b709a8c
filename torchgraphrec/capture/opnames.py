"""Op names as the model's code wrote them, and the short text of an op's non-tensor arguments."""

from __future__ import annotations

import inspect
import re
from collections.abc import Iterable
from functools import lru_cache
from typing import Any

import torch

__all__ = ["ALL_TENSORS", "MAX_ARGS_TEXT", "NO_KWARGS", "SET_DATA", "SHARED_COUNTS", "TENSOR",
           "UNPACK_DUAL", "args_text",
           "given_kwargs", "mutates_by_name", "op_args_text", "op_name_of"]

MAX_ARGS_TEXT = 60

#: Calls that only read metadata or turn a tensor into a Python value: never ops.
_METADATA = frozenset({
    "size", "dim", "ndimension", "stride", "numel", "nelement", "element_size",
    "storage_offset", "is_floating_point", "is_complex", "is_signed", "is_contiguous",
    "is_inference", "is_set_to", "is_shared", "is_pinned", "is_same_size", "has_names",
    "data_ptr", "get_device", "untyped_storage", "storage", "_typed_storage", "item",
    "tolist", "numpy", "type", "dim_order", "_is_view", "__len__", "__format__",
    "__repr__", "__str__", "__bool__", "__int__", "__float__", "__index__", "__complex__",
    "__hash__", "__reduce_ex__", "__array__", "__dlpack__", "__dlpack_device__",
    "__contains__", "equal", "allclose", "is_nonzero", "register_hook",
    "register_post_accumulate_grad_hook", "retain_grad",
})

#: Tensor properties that compute a new tensor (the rest, like ``.shape``, are metadata).
_TENSOR_PROPERTIES = frozenset({"T", "mT", "H", "mH", "real", "imag", "data"})

#: In-place operator dunders, named as their in-place methods.
_INPLACE_DUNDERS = {
    "iadd": "add_", "isub": "sub_", "imul": "mul_", "itruediv": "div_", "idiv": "div_",
    "ifloordiv": "floor_divide_", "imod": "remainder_", "ipow": "pow_", "imatmul": "matmul_",
    "iand": "bitwise_and_", "ior": "bitwise_or_", "ixor": "bitwise_xor_",
    "ilshift": "bitwise_left_shift_", "irshift": "bitwise_right_shift_",
}
_OPERATOR_DUNDERS = {"truediv": "div", "rtruediv": "div", "rdiv": "div", "invert": "bitwise_not"}
_REFLECTED = frozenset({"radd", "rsub", "rmul", "rmatmul", "rfloordiv", "rmod", "rpow",
                        "rand", "ror", "rxor", "rlshift", "rrshift"})


#: The name of ``x.data = y``, which is no op: ``x`` takes ``y``'s value, whatever made it.
SET_DATA = "set_data"

#: Forward-mode AD's unpacking of a dual tensor: under ``torch.func.jvp``, the op whose
#: results are the transform's wrappers of what the transform hands out as it returns.
UNPACK_DUAL = "_unpack_dual"


def op_name_of(func: Any) -> str:
    """What the model's code called, or ``""`` for a call that is not an op.

    >>> op_name_of(torch.Tensor.add), op_name_of(torch.Tensor.__rsub__)
    ('add', 'sub')
    >>> op_name_of(torch.Tensor.__getitem__), op_name_of(torch.Tensor.__iadd__)
    ('getitem', 'add_')
    >>> op_name_of(torch.nn.functional.linear), op_name_of(torch.Tensor.size)
    ('linear', '')
    >>> op_name_of(torch.Tensor.T.__get__), op_name_of(torch.Tensor.shape.__get__)
    ('T', '')
    >>> op_name_of(torch.Tensor.data.__set__), op_name_of(torch.Tensor.requires_grad.__set__)
    ('set_data', '')
    """
    name = getattr(func, "__name__", None) or type(func).__name__
    if name == "__get__":  # a property read: metadata, unless it computes a tensor
        prop = getattr(getattr(func, "__self__", None), "__name__", "")
        return prop if prop in _TENSOR_PROPERTIES else ""
    if name == "__set__":  # a property set: x.data = y gives x y's value, the rest flags
        prop = getattr(getattr(func, "__self__", None), "__name__", "")
        return SET_DATA if prop == "data" else ""
    if name in _METADATA:
        return ""
    if name.startswith("__") and name.endswith("__") and len(name) > 4:
        stem = name[2:-2]
        if stem in _INPLACE_DUNDERS:
            return _INPLACE_DUNDERS[stem]
        if stem in _OPERATOR_DUNDERS:
            return _OPERATOR_DUNDERS[stem]
        return stem[1:] if stem in _REFLECTED else stem
    return name


#: In-place methods that change a tensor's flags or where it lives, never its values.
_KEEPS_ITS_VALUE = frozenset({"requires_grad_", "share_memory_", "detach_", "retain_grad_",
                              "pin_memory_", "rename_", "refine_names_"})


def mutates_by_name(name: str, args: tuple, kwargs: dict) -> tuple[torch.Tensor, ...]:
    """The tensors an op changes in place by its name alone (``add_``, ``setitem``, ``out=``
    with one tensor or several, ``inplace=True``), for inference tensors, which keep no
    version counter; empty where there are none.

    >>> x, y = torch.zeros(1), torch.zeros(1)
    >>> mutates_by_name("add_", (x, 1), {})[0] is x, mutates_by_name("add", (x, 1), {})
    (True, ())
    >>> [t is y for t in mutates_by_name("max", (x, 0), {"out": (x, y)})]
    [False, True]
    >>> mutates_by_name("requires_grad_", (x,), {})
    ()
    """
    out = kwargs.get("out")
    if isinstance(out, torch.Tensor):
        return (out,)
    if isinstance(out, (tuple, list)):
        return tuple(tensor for tensor in out if isinstance(tensor, torch.Tensor))
    inplace = kwargs.get("inplace") is True or (name.endswith("_") and not name.startswith("_")
                                                 and name not in _KEEPS_ITS_VALUE)
    if (inplace or name == "setitem") and args and isinstance(args[0], torch.Tensor):
        return (args[0],)
    return ()


class _TensorMark:
    """Stands for a tensor argument in the arguments an op record keeps (so that a record
    keeps no activation alive)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "t"


#: What an op record keeps where a tensor argument was.
TENSOR = _TensorMark()

#: How many tensor arguments :data:`ALL_TENSORS` has a shared tuple for: fewer than this.
SHARED_COUNTS = 8

#: The arguments an op record keeps where each was a tensor, by their count (below
#: :data:`SHARED_COUNTS`): the records share these tuples, and an op given one has no
#: argument text
ALL_TENSORS = tuple((TENSOR,) * count for count in range(SHARED_COUNTS))

#: The keyword arguments of an op given none: one dict that every such record shares, and
#: that nothing may write to
NO_KWARGS: dict = {}


#: Types whose text is their ``repr`` (floats: the shortest text that reads back the same).
_REPR_TYPES = frozenset({int, float, bool, str, type(None)})


#: Exact types of the usual non-number arguments (sizes, dtypes, devices), looked up first
#: (dtypes and devices cannot be subclassed).
_SEQUENCE_TYPES = frozenset({tuple, list, torch.Size})
_NAMED_TYPES = frozenset({torch.dtype, torch.device})


def _value_text(value: Any) -> str:
    kind = type(value)
    if kind in _REPR_TYPES:  # the usual arguments first: this runs for every op
        return repr(value)
    if kind in _SEQUENCE_TYPES:
        return _sequence_text(value)
    if kind in _NAMED_TYPES:
        return str(value).replace("torch.", "")
    if kind is _TensorMark or isinstance(value, torch.Tensor):
        return "t"
    if isinstance(value, float):
        return repr(value)  # the shortest text that reads back the same: 0.1, 4.0, 1e-05
    if isinstance(value, slice):
        parts = ["" if part is None else _value_text(part)
                 for part in (value.start, value.stop, value.step)]
        return ":".join(parts[:2] if value.step is None else parts)
    if value is Ellipsis:
        return "..."
    if isinstance(value, (tuple, list)):
        return _sequence_text(value)
    if callable(value) and hasattr(value, "__name__"):
        return value.__name__
    return _any_repr(value)


#: A default ``repr``'s memory address, which differs from run to run.
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def _any_repr(value: Any) -> str:
    """``repr(value)``, or its type's name where the repr fails or names a memory address
    (a ``Generator``'s, a packed weight's): any value may be given, and two recordings of
    one model read the same.

    >>> class Broken:
    ...     def __repr__(self): raise ValueError("no")
    >>> _any_repr([1]), _any_repr(Broken()), _any_repr(torch.Generator())
    ('[1]', '<Broken>', '<Generator>')
    """
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - a user's repr; the text is only a description
        return f"<{type(value).__name__}>"
    return f"<{type(value).__name__}>" if _ADDRESS.search(text) else text


def _equal(value: Any, default: Any) -> bool:
    """``value == default``, as ``False`` where that is not a plain truth value (a NumPy
    array's elementwise ``==``, a comparison that raises).

    >>> import numpy
    >>> _equal(1, 1), _equal(numpy.zeros(2), numpy.zeros(2))
    (True, False)
    """
    try:
        return (value == default) is True
    except Exception:  # noqa: BLE001 - a user's __eq__
        return False


def _sequence_text(value: tuple | list) -> str:
    inner = ", ".join([repr(item) if type(item) in _REPR_TYPES else _value_text(item)
                       for item in value])
    if isinstance(value, tuple):
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    return f"[{inner}]"


def _is_tensor_only(value: Any) -> bool:
    kind = type(value)
    if kind is _TensorMark:
        return True
    if kind in _REPR_TYPES:
        return False
    if isinstance(value, torch.Tensor):
        return True
    return isinstance(value, (tuple, list)) and bool(value) and all(
        isinstance(item, (torch.Tensor, _TensorMark)) for item in value)


#: What :func:`_defaults` has for a parameter without a default.
_NO_DEFAULT = object()


@lru_cache(maxsize=4096)
def _defaults(func: Any) -> dict[str, Any]:
    try:
        parameters = inspect.signature(func).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature: its kwargs were given
        return {}
    return {p.name: p.default for p in parameters if p.default is not inspect.Parameter.empty}


def given_kwargs(func: Any, kwargs: dict) -> dict:
    """The keyword arguments the caller gave: functions written in Python (``F.softmax``)
    hand the mode all of theirs, defaults and private ones (``_stacklevel``) included.

    >>> given_kwargs(torch.nn.functional.softmax, {"dim": -1, "_stacklevel": 3, "dtype": None})
    {'dim': -1}
    """
    if not kwargs:
        return kwargs
    try:
        defaults = _defaults(func)
    except TypeError:  # unhashable
        defaults = {}
    given = {}
    for key, value in kwargs.items():
        default = defaults.get(key, _NO_DEFAULT)
        if key[:1] != "_" and not (type(value) is type(default) and _equal(value, default)):
            given[key] = value
    return given


def args_text(name: str, args: tuple, kwargs: dict) -> str:
    """The op's non-tensor arguments as the code gave them, at most :data:`MAX_ARGS_TEXT`
    characters; an index for ``getitem``/``setitem`` as in the source.

    >>> x = torch.zeros(2, 3)
    >>> args_text("view", (x, 2, 8, -1), {}), args_text("softmax", (x,), {"dim": 1})
    ('2, 8, -1', 'dim=1')
    >>> args_text("getitem", (x, (slice(None), slice(None, 2))), {})
    '[:, :2]'
    >>> args_text("cat", ([x, x],), {"dim": 1})
    'dim=1'
    """
    if not kwargs and all(value is TENSOR for value in args):
        return ""  # the usual case: tensors only
    if name in ("getitem", "setitem") and len(args) >= 2:
        index = args[1] if isinstance(args[1], tuple) else (args[1],)
        text = "[" + ", ".join(_value_text(item) for item in index) + "]"
    else:
        # the usual values (tensors, numbers) inline: this runs for most ops
        parts = []
        for value in args:
            if type(value) in _REPR_TYPES:
                parts.append(repr(value))
            elif value is not TENSOR and not _is_tensor_only(value):
                parts.append(_value_text(value))
        for key, value in kwargs.items():
            if type(value) in _REPR_TYPES:
                parts.append(f"{key}={value!r}")
            elif value is not TENSOR and not _is_tensor_only(value):
                parts.append(f"{key}={_value_text(value)}")
        text = ", ".join(parts)
    return text if len(text) <= MAX_ARGS_TEXT else text[:MAX_ARGS_TEXT - 1] + "…"


#: Types whose equal values always have the same text (and floats but their zeros: -0.0 == 0.0),
#: and the hashable sequences of them.
_KEY_TYPES = frozenset({int, str, bool, type(None), _TensorMark, torch.dtype, torch.device})
_HASHABLE_SEQUENCES = frozenset({tuple, torch.Size})
_FLAT_TYPES = _KEY_TYPES | {float}
_TEXTS: dict[tuple, str] = {}  # op_args_text's texts by (name, func, arguments, their types)
_TEXTS_LIMIT = 4096


def _exact_types(values: Iterable) -> tuple | None:
    """The exact type of each value (and of each item of a tuple), or ``None`` where equal
    values of these types may have different texts or are not hashable: with their types,
    equal arguments have one text (1 == 1.0 == True does not)."""
    types: list = []
    for value in values:
        kind = type(value)
        if kind in _KEY_TYPES or (kind is float and value):
            types.append(kind)
        elif kind in _HASHABLE_SEQUENCES:
            inner = _exact_types(value)
            if inner is None:
                return None
            types.append((kind, inner))
        else:
            return None
    return tuple(types)


def _types_of(values: tuple) -> tuple | None:
    """:func:`_exact_types` of ``values``, from ``map`` (in C) where they are flat: numbers,
    strings, ``None`` and marks, and no float zero (``0.0 in values`` also finds an int or
    bool zero, which :func:`_exact_types` then tells apart).

    >>> _types_of((TENSOR, 2, -1.5)) == _exact_types((TENSOR, 2, -1.5))
    True
    >>> _types_of((0.0,)) is None and _types_of((0, 2.0)) == (int, float)
    True
    """
    kinds = tuple(map(type, values))
    if _FLAT_TYPES.issuperset(kinds) and (float not in kinds or 0.0 not in values):
        return kinds
    return _exact_types(values)


def op_args_text(name: str, func: Any, args: tuple, kwargs: dict) -> str:
    """``args_text`` of the arguments ``func`` was given, remembered by arguments (an op is
    called with the same ones in every block of a model) where that is exact.

    >>> op_args_text("softmax", torch.nn.functional.softmax, (TENSOR,), {"dim": -1, "dtype": None})
    'dim=-1'
    """
    types = _types_of(args)
    if types is not None and kwargs:
        kwargs_types = _types_of(tuple(kwargs.values()))
        types = None if kwargs_types is None else (types, kwargs_types)
    if types is None:
        return args_text(name, args, given_kwargs(func, kwargs))
    key = (name, func, args, tuple(kwargs.items()), types)
    try:
        text = _TEXTS.get(key)
    except TypeError:  # an unhashable function
        return args_text(name, args, given_kwargs(func, kwargs))
    if text is None:
        if len(_TEXTS) >= _TEXTS_LIMIT:
            _TEXTS.clear()
        text = _TEXTS[key] = args_text(name, args, given_kwargs(func, kwargs))
    return text
