#!/usr/bin/env python3
"""Writes tests/gguf_corpus/: one small valid GGUF file and malformed variants of it,
each broken in one way a truncated or hostile file can be. The reader must refuse
every bad_* file with a GgufError (tests/gguf_test.cpp checks the message), and the
fuzzer starts from all of them. Raw bytes are written by hand, so each defect is
exactly the one named.

    python3 tests/make_gguf_corpus.py   # rewrites tests/gguf_corpus/
"""
import struct
from pathlib import Path

OUT = Path(__file__).resolve().parent / "gguf_corpus"
U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)


def s(text):
    b = text.encode()
    return struct.pack("<Q", len(b)) + b


def kv(key, vtype, payload):
    return s(key) + struct.pack("<I", vtype) + payload


def tensor_info(name, dims, ttype, offset):
    return s(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims) + \
        struct.pack("<IQ", ttype, offset)


def gguf(kvs, infos, data, version=3, magic=b"GGUF", align=32, n_tensors=None, n_kv=None):
    head = magic + struct.pack("<IQQ", version, len(infos) if n_tensors is None else n_tensors,
                               len(kvs) if n_kv is None else n_kv)
    body = head + b"".join(kvs) + b"".join(infos)
    pad = (-len(body)) % align
    return body + b"\0" * pad + data


def base_kvs():
    return [
        kv("general.architecture", STR, s("llama")),
        kv("general.alignment", U32, struct.pack("<I", 32)),
        kv("llama.block_count", U32, struct.pack("<I", 1)),
        kv("llama.rope.freq_base", F32, struct.pack("<f", 10000.0)),
        kv("tokenizer.ggml.tokens", ARR, struct.pack("<IQ", STR, 3) + s("<s>") + s("a") + s("b")),
        kv("tokenizer.ggml.scores", ARR, struct.pack("<IQ", F32, 3) + struct.pack("<3f", 0, -1, -2)),
        kv("general.flag", BOOL, b"\x01"),
    ]


def base_infos():
    # a 2x32 F32 tensor (256 bytes) at 0 and a 1x32 Q8_0 tensor (34 bytes) at 256
    return [tensor_info("w.f32", [32, 2], 0, 0), tensor_info("w.q8_0", [32, 1], 8, 256)]


def base_data():
    return bytes(range(256)) + bytes(34)


def main():
    OUT.mkdir(exist_ok=True)
    for old in OUT.glob("*.gguf"):
        old.unlink()
    valid = gguf(base_kvs(), base_infos(), base_data())
    cases = {
        "valid": valid,
        "valid_v2_no_tensors": gguf(base_kvs(), [], b"", version=2),
        "bad_magic": gguf(base_kvs(), base_infos(), base_data(), magic=b"GGML"),
        "bad_version1": gguf(base_kvs(), base_infos(), base_data(), version=1),
        "bad_version_bigendian": gguf(base_kvs(), base_infos(), base_data(), version=3 << 24),
        "bad_truncated_header": valid[:10],
        "bad_truncated_metadata": valid[:60],
        "bad_truncated_data": valid[:-20],
        "bad_kv_count_huge": gguf(base_kvs(), base_infos(), base_data(), n_kv=1 << 60),
        "bad_tensor_count_huge": gguf(base_kvs(), base_infos(), base_data(), n_tensors=1 << 62),
        "bad_string_length_huge": gguf([kv("k", STR, struct.pack("<Q", 1 << 40) + b"x")], [], b""),
        "bad_array_length_huge": gguf([kv("k", ARR, struct.pack("<IQ", U32, 1 << 61))], [], b""),
        "bad_string_array_huge": gguf([kv("k", ARR, struct.pack("<IQ", STR, 1 << 59))], [], b""),
        "bad_nested_array": gguf([kv("k", ARR, struct.pack("<IQ", ARR, 1) + struct.pack("<IQ", U8, 0))], [], b""),
        "bad_value_type": gguf([kv("k", 13, b"\0" * 8)], [], b""),
        "bad_bool": gguf([kv("k", BOOL, b"\x07")], [], b""),
        "bad_duplicate_key": gguf(base_kvs() + [kv("llama.block_count", U32, struct.pack("<I", 2))],
                                  base_infos(), base_data()),
        "bad_alignment_not_pow2": gguf([kv("general.alignment", U32, struct.pack("<I", 24))], [], b""),
        "bad_alignment_type": gguf([kv("general.alignment", U64, struct.pack("<Q", 32))], [], b""),
        "bad_tensor_misaligned": gguf(base_kvs(), [tensor_info("w", [32], 0, 4)], bytes(160)),
        "bad_tensor_out_of_range": gguf(base_kvs(), [tensor_info("w", [32, 100], 0, 0)], bytes(128)),
        "bad_tensor_offset_huge": gguf(base_kvs(), [tensor_info("w", [32], 0, 1 << 63)], bytes(128)),
        "bad_tensor_duplicate": gguf(base_kvs(), [tensor_info("w", [32], 0, 0), tensor_info("w", [32], 0, 128)],
                                     bytes(256)),
        "bad_tensor_overlap": gguf(base_kvs(), [tensor_info("a", [64], 0, 0), tensor_info("b", [32], 0, 128)],
                                   bytes(512)),
        "bad_tensor_type": gguf(base_kvs(), [tensor_info("w", [32], 99, 0)], bytes(128)),
        "bad_tensor_dims5": gguf(base_kvs(), [tensor_info("w", [1, 1, 1, 1, 32], 0, 0)], bytes(128)),
        "bad_tensor_zero_dim": gguf(base_kvs(), [tensor_info("w", [32, 0], 0, 0)], bytes(128)),
        "bad_tensor_dims_overflow": gguf(base_kvs(), [tensor_info("w", [1 << 32, 1 << 32, 16], 0, 0)], bytes(128)),
        "bad_tensor_block_multiple": gguf(base_kvs(), [tensor_info("w", [31], 8, 0)], bytes(128)),
        "bad_empty_key": gguf([kv("", U8, b"\x01")], [], b""),
    }
    for name, data in cases.items():
        (OUT / f"{name}.gguf").write_bytes(data)
    print(f"wrote {len(cases)} files to {OUT}")


if __name__ == "__main__":
    main()
