"""A tiny, dependency-free safetensors writer and reader (numpy only).

Format (https://github.com/huggingface/safetensors):
  * 8 bytes: little-endian uint64 N, the length of the JSON header;
  * N bytes: UTF-8 JSON object mapping each tensor name to
    {"dtype": "F32" | "F64" | "I32", "shape": [...], "data_offsets": [begin, end]}
    (offsets relative to the start of the data buffer), plus an optional
    "__metadata__": {str: str};
  * the data buffer: raw little-endian, row-major tensor data.

This writer lays tensors out in sorted-name order, emits compact JSON ("__metadata__" first,
then the tensors in sorted order) and pads the header with spaces to a multiple of 8 bytes, so
the data buffer starts 8-byte aligned. Output is a pure function of the inputs (byte-identical
on every run).
"""
import json
import struct

import numpy as np

# safetensors dtype name -> little-endian numpy dtype. Only what the golden files need.
DTYPES = {
    "F32": np.dtype("<f4"),
    "F64": np.dtype("<f8"),
    "I32": np.dtype("<i4"),
}


def _dtype_name(arr: np.ndarray) -> str:
    for name, dt in DTYPES.items():
        if arr.dtype.kind == dt.kind and arr.dtype.itemsize == dt.itemsize:
            return name
    raise TypeError(f"unsupported dtype {arr.dtype} (cast explicitly to float32/float64/int32)")


def _to_numpy(value) -> np.ndarray:
    if isinstance(value, np.ndarray):
        return value
    # torch tensors (imported lazily so this module stays numpy-only)
    if hasattr(value, "detach") and hasattr(value, "numpy"):
        return value.detach().cpu().contiguous().numpy()
    raise TypeError(f"expected a numpy array or torch tensor, got {type(value)}")


def serialize(tensors: dict, metadata: dict | None = None) -> bytes:
    """Returns the bytes of a safetensors file holding `tensors` ({name: array})."""
    header = {}
    if metadata:
        for k, v in metadata.items():
            if not isinstance(k, str) or not isinstance(v, str):
                raise TypeError("metadata must map str to str")
        header["__metadata__"] = dict(sorted(metadata.items()))
    chunks = []
    offset = 0
    for name in sorted(tensors):
        if name == "__metadata__":
            raise ValueError("'__metadata__' is reserved")
        arr = _to_numpy(tensors[name])
        dtype = _dtype_name(arr)
        data = np.ascontiguousarray(arr, dtype=DTYPES[dtype]).tobytes(order="C")
        header[name] = {
            "dtype": dtype,
            "shape": [int(s) for s in arr.shape],
            "data_offsets": [offset, offset + len(data)],
        }
        chunks.append(data)
        offset += len(data)
    header_bytes = json.dumps(header, separators=(",", ":"), ensure_ascii=True).encode("utf-8")
    header_bytes += b" " * (-len(header_bytes) % 8)
    return struct.pack("<Q", len(header_bytes)) + header_bytes + b"".join(chunks)


def save_file(tensors: dict, path: str, metadata: dict | None = None) -> None:
    data = serialize(tensors, metadata)
    with open(path, "wb") as f:
        f.write(data)


def deserialize(data: bytes) -> tuple[dict, dict]:
    """Parses safetensors bytes; returns ({name: numpy array}, metadata)."""
    if len(data) < 8:
        raise ValueError("file too short")
    (n,) = struct.unpack("<Q", data[:8])
    if 8 + n > len(data):
        raise ValueError("header length exceeds file size")
    header = json.loads(data[8:8 + n].decode("utf-8"))
    metadata = header.pop("__metadata__", {}) or {}
    buf = data[8 + n:]
    tensors = {}
    spans = []
    for name, info in header.items():
        dt = DTYPES.get(info["dtype"])
        if dt is None:
            raise ValueError(f"{name}: unsupported dtype {info['dtype']}")
        shape = tuple(int(s) for s in info["shape"])
        begin, end = (int(x) for x in info["data_offsets"])
        count = int(np.prod(shape, dtype=np.int64))
        if not (0 <= begin <= end <= len(buf)) or end - begin != count * dt.itemsize:
            raise ValueError(f"{name}: bad data_offsets {begin}..{end} for shape {shape}")
        tensors[name] = np.frombuffer(buf, dtype=dt, count=count, offset=begin).reshape(shape).copy()
        spans.append((begin, end))
    spans.sort()
    pos = 0
    for begin, end in spans:
        if begin != pos:
            raise ValueError("tensor data is not contiguous / overlaps")
        pos = end
    if pos != len(buf):
        raise ValueError("trailing bytes after the last tensor")
    return tensors, metadata


def load_file(path: str) -> tuple[dict, dict]:
    with open(path, "rb") as f:
        return deserialize(f.read())


if __name__ == "__main__":  # self-test
    t = {"b": np.arange(6, dtype=np.float32).reshape(2, 3), "a": np.array([1.5]),
         "c": np.array([[1, -2]], dtype=np.int32)}
    raw = serialize(t, {"k": "v"})
    assert (8 + struct.unpack("<Q", raw[:8])[0]) % 8 == 0
    back, meta = deserialize(raw)
    assert meta == {"k": "v"}
    for k in t:
        assert back[k].dtype == t[k].dtype and np.array_equal(back[k], t[k])
    print("safetensors_io self-test ok")
