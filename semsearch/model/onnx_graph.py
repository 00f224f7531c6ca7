"""Small ONNX models written by hand, for onnxruntime to run: the int8 vector scan's product.

The ``onnx`` package is not a dependency (no small library writes ONNX), so the protobuf is
written field by field here. Field numbers are those of onnx.proto (ModelProto, GraphProto,
NodeProto, TensorProto and its StringStringEntryProto, ValueInfoProto, TypeProto).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from semsearch.errors import ModelError

Int8Array = np.ndarray[Any, np.dtype[np.int8]]


def single_thread_session(model: bytes, files: dict[str, memoryview] | None = None) -> Any:
    """A one-thread onnxruntime session of ``model``, whose external data (if any) is read from
    ``files`` (name → contents, copied by onnxruntime while it builds the session); raises
    :class:`~semsearch.errors.ModelError` when onnxruntime cannot build it."""
    import onnxruntime as ort  # heavy: loaded by the first warm search that scans

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    try:
        if files:
            names = list(files)
            options.add_external_initializers_from_files_in_memory(
                names, [files[n] for n in names], [files[n].nbytes for n in names]
            )
        return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime's errors derive from Exception alone (and an old
        raise ModelError(str(exc)) from exc  # one lacks files in memory: AttributeError)


# Element types of onnx.proto. The matrix is copied once, into the joined bytes (none of it is
# in the bytes of matmul_integer_external_model).
_UINT8, _INT8, _INT32 = 2, 3, 6
Parts = list[bytes | memoryview]


def matmul_integer_model(columns: Int8Array, zero_point: int) -> bytes:
    """One MatMulInteger node: ``sums = (q - zero_point) @ columns`` (q: 2 x dim u8)."""
    dim, rows = columns.shape
    node = _text(1, "q") + _text(1, "m") + _text(1, "zero") + _text(2, "sums")
    node += _text(4, "MatMulInteger")
    matrix = _tensor("m", _INT8, [dim, rows], [memoryview(columns.data).cast("B")])
    graph: Parts = [_field(1, [node]), _text(2, "scan"), *_field_parts(5, matrix)]
    graph.append(_field(5, _tensor("zero", _UINT8, [], [bytes([zero_point])])))
    graph.append(_field(11, [_value_info("q", _UINT8, [2, dim])]))
    graph.append(_field(12, [_value_info("sums", _INT32, [2, rows])]))
    opset = _field(8, [_text(1, ""), _number(2, 13)])
    return b"".join([_number(1, 8), opset, *_field_parts(7, graph)])


def matmul_integer_input_model(dim: int, zero_point: int) -> bytes:
    """One MatMulInteger node whose matrix is an input: ``sums = (q - zero_point) @ m`` (q: 2 x
    dim u8, m: dim x n s8, any n). Nothing is packed at build time and the caller's array is
    read in place, so a matrix held in blocks costs neither a build nor a second copy."""
    node = _text(1, "q") + _text(1, "m") + _text(1, "zero") + _text(2, "sums")
    node += _text(4, "MatMulInteger")
    graph: Parts = [_field(1, [node]), _text(2, "scan")]
    graph.append(_field(5, _tensor("zero", _UINT8, [], [bytes([zero_point])])))
    graph.append(_field(11, [_value_info("q", _UINT8, [2, dim])]))
    graph.append(_field(11, [_value_info("m", _INT8, [dim, "n"])]))
    graph.append(_field(12, [_value_info("sums", _INT32, [2, "n"])]))
    opset = _field(8, [_text(1, ""), _number(2, 13)])
    return b"".join([_number(1, 8), opset, *_field_parts(7, graph)])


def matmul_integer_external_model(dim: int, rows: int, zero_point: int, file: str) -> bytes:
    """The model of :func:`matmul_integer_model` whose ``dim x rows`` s8 matrix is external data:
    the bytes of the file named ``file``, which the session is given from memory
    (:func:`single_thread_session`). onnxruntime copies them into the constant it packs for its
    kernel and then frees that constant, so a session holds one packed copy and the caller's
    bytes can go: with the matrix inside the model it kept two (the model's and the packed)."""
    node = _text(1, "q") + _text(1, "m") + _text(1, "zero") + _text(2, "sums")
    node += _text(4, "MatMulInteger")
    where = [("location", file), ("offset", "0"), ("length", str(dim * rows))]
    matrix = b"".join(_number(1, d) for d in (dim, rows)) + _number(2, _INT8) + _text(8, "m")
    matrix += b"".join(_field(13, [_text(1, key) + _text(2, value)]) for key, value in where)
    matrix += _number(14, 1)  # data_location: EXTERNAL
    graph: Parts = [_field(1, [node]), _text(2, "scan"), _field(5, [matrix])]
    graph.append(_field(5, _tensor("zero", _UINT8, [], [bytes([zero_point])])))
    graph.append(_field(11, [_value_info("q", _UINT8, [2, dim])]))
    graph.append(_field(12, [_value_info("sums", _INT32, [2, rows])]))
    opset = _field(8, [_text(1, ""), _number(2, 13)])
    return b"".join([_number(1, 8), opset, *_field_parts(7, graph)])


def _tensor(name: str, kind: int, dims: list[int], raw: Parts) -> Parts:
    head = b"".join(_number(1, d) for d in dims) + _number(2, kind) + _text(8, name)
    return [head, *_field_parts(9, raw)]


def _value_info(name: str, kind: int, dims: list[int | str]) -> bytes:
    # a dimension is a number (dim_value) or a name (dim_param: any size)
    shape = b"".join(
        _field(1, [_text(2, d) if isinstance(d, str) else _number(1, d)]) for d in dims
    )
    return _text(1, name) + _field(2, [_field(1, [_number(1, kind), _field(2, [shape])])])


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _number(field: int, value: int) -> bytes:
    return _varint(field << 3) + _varint(value)


def _field_parts(field: int, payload: Parts) -> Parts:
    """A length-delimited field whose payload stays in parts (no copy)."""
    return [_varint(field << 3 | 2) + _varint(sum(len(part) for part in payload)), *payload]


def _field(field: int, payload: Parts) -> bytes:
    return b"".join(_field_parts(field, payload))


def _text(field: int, value: str) -> bytes:
    return _field(field, [value.encode()])
