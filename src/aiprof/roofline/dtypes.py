"""Dtype names as traces spell them (``c10::BFloat16``, ``float``, ``bfloat16``, ``torch.float8_e4m3fn``)
normalised to one short vocabulary, with bytes per element and torch's type-promotion order.

Why a module of its own: peers lost 9.7 % of a trace's time because Triton ops spell dtypes differently
(``bfloat16`` vs ``c10::BFloat16``) and missed their spec table. Every lookup goes through :func:`normalise`.
"""

from __future__ import annotations

# Short name -> bytes per element. fp8 variants share "fp8"; sub-byte types are counted as one byte.
BYTES_PER_ELEMENT: dict[str, int] = {
    "fp64": 8,
    "fp32": 4,
    "tf32": 4,
    "fp16": 2,
    "bf16": 2,
    "fp8": 1,
    "fp4": 1,
    "int64": 8,
    "int32": 4,
    "int16": 2,
    "int8": 1,
    "uint8": 1,
    "bool": 1,
    "complex128": 16,
    "complex64": 8,
    "complex32": 4,
}

_ALIASES: dict[str, str] = {
    "double": "fp64",
    "float64": "fp64",
    "fp64": "fp64",
    "float": "fp32",
    "float32": "fp32",
    "fp32": "fp32",
    "tf32": "tf32",
    "c10::half": "fp16",
    "half": "fp16",
    "float16": "fp16",
    "fp16": "fp16",
    "c10::bfloat16": "bf16",
    "bfloat16": "bf16",
    "bf16": "bf16",
    "long int": "int64",
    "long": "int64",
    "int64": "int64",
    "long long": "int64",
    "int": "int32",
    "int32": "int32",
    "short int": "int16",
    "short": "int16",
    "int16": "int16",
    "signed char": "int8",
    "int8": "int8",
    "c10::qint8": "int8",
    "unsigned char": "uint8",
    "uint8": "uint8",
    "c10::quint8": "uint8",
    "bool": "bool",
    "c10::complex<double>": "complex128",
    "complex128": "complex128",
    "c10::complex<float>": "complex64",
    "complex64": "complex64",
    "c10::complex<c10::half>": "complex32",
}

# ScalarType codes (c10/core/ScalarType.h) as they appear in ``Concrete Inputs`` for dtype arguments.
SCALAR_TYPE_CODES: dict[int, str] = {
    0: "uint8",
    1: "int8",
    2: "int16",
    3: "int32",
    4: "int64",
    5: "fp16",
    6: "fp32",
    7: "fp64",
    8: "complex32",
    9: "complex64",
    10: "complex128",
    11: "bool",
    15: "bf16",
    23: "fp8",
    24: "fp8",
    25: "fp8",
    26: "fp8",
}

# Promotion category, then size: bool < integers < floating < complex (torch's rule, simplified).
_CATEGORY = {"bool": 0, "uint8": 1, "int8": 1, "int16": 1, "int32": 1, "int64": 1, "complex32": 3, "complex64": 3}
_CATEGORY.update({"complex128": 3})

NON_TENSOR_TYPES = frozenset({"", "scalar", "scalarlist", "tensorlist", "none", "device", "layout", "string"})


def normalise(type_name: object) -> str | None:
    """The short dtype name of a trace's ``Input type`` entry, or None when it is not a tensor dtype."""
    if not isinstance(type_name, str):
        return None
    found = _NORMALISED.get(type_name, "?")
    if found == "?":
        found = _NORMALISED[type_name] = _normalise(type_name)
    return found


_NORMALISED: dict[str, str | None] = {}  # a trace holds a few dozen distinct type names


# IValue tags Kineto writes in ``Input type`` for non-tensor arguments (``Int``, ``Double``, ``Bool``…).
# Tensor dtypes are spelled in lower case (``int``, ``double``, ``bool``, ``float``) or ``c10::``/``torch.``
# names, so the capitalised tags are told apart before lower-casing: ``Int`` is an int argument, not an
# int32 tensor.
IVALUE_TAGS = frozenset(
    """Int Double Bool SymInt SymFloat SymBool ComplexDouble GenericList IntList DoubleList BoolList String
    Device Layout Tuple Object Generator Storage Enum Stream Future Capsule Quantizer RRef Await None
    Uninitialized""".split()
)


def _normalise(type_name: str) -> str | None:
    if type_name.strip() in IVALUE_TAGS:
        return None
    text = type_name.strip().lower()
    if text.startswith("torch."):
        text = text[6:]
    if text in NON_TENSOR_TYPES:
        return None
    if text in _ALIASES:
        return _ALIASES[text]
    if "float8" in text or "fp8" in text:
        return "fp8"
    if "float4" in text or "fp4" in text:
        return "fp4"
    return None


def bytes_per_element(dtype: str | None, default: int = 4) -> int:
    """Bytes per element of a short dtype name (``default`` when unknown)."""
    if dtype is None:
        return default
    return BYTES_PER_ELEMENT.get(dtype, default)


def category(dtype: str) -> int:
    """Promotion category: 0 bool, 1 integer, 2 floating, 3 complex."""
    return _CATEGORY.get(dtype, 2)


def promote(dtypes: list[str]) -> str | None:
    """Result dtype of an elementwise op over tensors of these dtypes (highest category, then widest)."""
    if not dtypes:
        return None
    return max(dtypes, key=lambda d: (category(d), bytes_per_element(d)))


def from_scalar_type_code(text: object) -> str | None:
    """A dtype argument recorded as its ScalarType code (``'15'`` → ``bf16``), else None."""
    if not isinstance(text, str) or not text.strip().lstrip("-").isdecimal():
        return None
    return SCALAR_TYPE_CODES.get(int(text))
