#!/usr/bin/env python3
"""Two greedy decodes of one prompt (`qmvlab decode --json`), side by side: how many
generated tokens agree before the first difference, and both texts.

    scripts/greedy_agreement.py cpu.json gpu.json
"""
import json
import sys


def main(first_path, second_path):
    first, second = (json.load(open(p)) for p in (first_path, second_path))
    a, b = first["generated_tokens"], second["generated_tokens"]
    same = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    print(f"greedy tokens: {same} of {len(a)} identical before the first difference")
    print("cpu:", repr(first.get("text", "")))
    print("gpu:", repr(second.get("text", "")))


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: scripts/greedy_agreement.py CPU.json GPU.json")
    main(sys.argv[1], sys.argv[2])
