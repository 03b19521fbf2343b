#!/usr/bin/env python3
"""qmvlab's decode against llama.cpp's, on the same GGUF files and thread counts.

Timing (the default): llama.cpp is timed with the pinned `llama-bench` that
scripts/install-peers.sh builds (token generation only, `-p 0 -n N -t T -r 1`), once
with its weight repacking on (`--repack 1`, what a llama.cpp user gets) and once with
it off, alternating round by round with `qmvlab decode` (-n N, --threads T,
--ignore-eos, the plan given by --plan, default auto); --rounds rounds, medians. The
roofline is qmvlab's: its measured read bandwidth over the bytes one decode step reads
(weights and KV cache), and both engines' speeds are given as a share of it. One row
per model is appended to --out (default results/<machine>/decode-vs-llamacpp.csv),
a table goes to stdout, progress to stderr.

On a GPU (--device cuda) the peer is the CUDA llama-bench that `scripts/install-peers.sh
--isa cuda` builds (every layer offloaded, -ngl 99; no repacking, a CPU feature) against
`qmvlab decode --device cuda`, and the row's machine is the GPU's results folder
(nvidia-h200). --dry-run prints the commands, round by round, and runs none.

  scripts/compare_llamacpp.py --threads 2
  scripts/compare_llamacpp.py --device cuda --model M.gguf --llama-bench PEER/bin/llama-bench --out results/<gpu>/x.csv
  scripts/compare_llamacpp.py --model models/M.gguf --threads 4 -n 128 --rounds 5 --out /tmp/x.csv

Without --model it runs the models it finds of the three the project measures:
SmolLM2-135M-Instruct Q4_1 and its Q4_K_M requant (scripts/get-model.sh) and the
synthetic TinyLlama-1.1B Q4_K_M (`qmvlab make-model --preset tinyllama-1.1b --mix
q4_K_m`). Exit status: 0 done, 1 a tool failed (its stderr's last lines are printed),
2 bad input, 3 skipped: the pinned llama-bench is not there.

llama-bench decodes from position 0 with a token each step; qmvlab decode is given the
model's BOS token as a one-token prompt, and both count only the generated tokens
(qmvlab times from the second one). Neither run depends on the tokens' values.

Tokens (--tokens): greedy decode of qmvlab against llama.cpp through llama.cpp's
Python binding, llama-cpp-python, which scripts/install-llamacpp.sh installs over the
same pinned build (the binding's library path, LLAMA_CPP_LIB_PATH, is pointed at
.peers/llama.cpp/build/bin when it is not set). For each prompt, llama.cpp tokenizes
it (BOS as the model's metadata says, special tokens
parsed), evaluates it and greedily decodes N tokens (plain argmax of the logits: no
temperature, no repetition penalty). `qmvlab decode` then gets the very same prompt token
ids, so the two generations can be compared token by token, and `qmvlab tokenize` is
checked against llama.cpp's ids on the same text.

llama.cpp quantizes the activations to 8 bits before each quantized matvec (Q8_1 for
Q4_1 weights, Q8_0 for Q8_0), which moves the logits by a few tenths; an engine that
keeps f32 activations can be more exact and still part from llama.cpp's greedy path at a
near tie. So by default a second reference is made too: llama.cpp on the same weights
dequantized to F32 (written with the gguf package into a temporary file), with an F32 KV
cache, i.e. llama.cpp with exact activations. Agreement with each is reported.

The engines alternate per prompt (llama.cpp, qmvlab, llama.cpp, qmvlab, ... --repeats
times) and speeds are medians. Decode speed is timed after the first generated token:
(N-1) / time of the N-1 single-token steps, the same definition `qmvlab decode` uses.
This mode runs with the llama.cpp venv's Python:
  .venv-llamacpp/bin/python scripts/compare_llamacpp.py --tokens --model models/M.gguf
"""
import argparse
import csv
import hashlib
import json
import math
import os
import shlex
import struct
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Varied English prompts; the last follows SmolLM2-Instruct's chat template (its default
# system message included), written out so the special tokens are visible.
BUILTIN_PROMPTS = [
    ("story", "Once upon a time, in a small village at the edge of a great forest, there lived"),
    ("science", "Photosynthesis is the process by which green plants"),
    ("history", "The Industrial Revolution began in Britain in the eighteenth century. It"),
    ("howto", "Here is a simple recipe for making pancakes at home. First,"),
    ("chat", "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
             "<|im_start|>user\nWhat are some good ways to stay healthy?<|im_end|>\n<|im_start|>assistant\n"),
]


EXIT_FAILED, EXIT_BAD_INPUT, EXIT_SKIPPED = 1, 2, 3


def fail(message, code=EXIT_BAD_INPUT):
    print(f"compare_llamacpp: {message}", file=sys.stderr)
    sys.exit(code)


def progress(message):
    print(message, file=sys.stderr, flush=True)


def load_prompts(path):
    """A JSON list of strings or {"id", "text"} objects; otherwise one prompt per line,
    with \\n, \\t and \\\\ escapes so a line can hold a multi-line (chat) prompt."""
    p = Path(path)
    if not p.is_file():
        fail(f"prompts file {path} not found")
    text = p.read_text(encoding="utf-8")
    prompts = []
    if p.suffix == ".json":
        try:
            items = json.loads(text)
        except json.JSONDecodeError as e:
            fail(f"{path}: not valid JSON: {e}")
        if not isinstance(items, list):
            fail(f"{path}: expected a JSON list of prompts")
        for i, item in enumerate(items):
            if isinstance(item, str):
                prompts.append((f"p{i}", item))
            elif isinstance(item, dict) and isinstance(item.get("text"), str):
                prompts.append((str(item.get("id", f"p{i}")), item["text"]))
            else:
                fail(f"{path}: item {i} is neither a string nor an object with a \"text\" string")
    else:
        unescape = {"n": "\n", "t": "\t", "\\": "\\"}
        for line in text.splitlines():
            if not line.strip():
                continue
            out, i = [], 0
            while i < len(line):
                if line[i] == "\\" and i + 1 < len(line) and line[i + 1] in unescape:
                    out.append(unescape[line[i + 1]])
                    i += 2
                else:
                    out.append(line[i])
                    i += 1
            prompts.append((f"p{len(prompts)}", "".join(out)))
    if not prompts:
        fail(f"{path}: no prompts")
    ids = [pid for pid, _ in prompts]
    if len(set(ids)) != len(ids):
        fail(f"{path}: prompt ids are not unique")
    return prompts


def sha256_of(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


class LlamaCppGreedy:
    """llama.cpp through llama-cpp-python: the Llama object loads the model and
    tokenizes; the decode loop calls the C API directly (one llama_decode per token,
    argmax over the last logits) so that Python adds as little as possible to the timing."""

    def __init__(self, model, threads, n_ctx, seed, f32_kv_cache=False):
        import llama_cpp
        import numpy as np
        self.lib, self.np = llama_cpp, np
        kv_type = llama_cpp.GGML_TYPE_F32 if f32_kv_cache else None  # None: llama.cpp's default, F16
        self.llm = llama_cpp.Llama(model_path=str(model), n_threads=threads, n_threads_batch=threads,
                                   n_ctx=n_ctx, n_batch=n_ctx, seed=seed, verbose=False, logits_all=False,
                                   type_k=kv_type, type_v=kv_type)
        self.ctx = self.llm.ctx
        self.vocab = llama_cpp.llama_model_get_vocab(self.llm.model)
        self.n_vocab = self.llm.n_vocab()
        self.add_bos = bool(llama_cpp.llama_vocab_get_add_bos(self.vocab))

    def tokenize(self, text):
        # add_bos here means "add the special tokens the model asks for": llama.cpp adds
        # BOS only when the model's metadata says so.
        return self.llm.tokenize(text.encode("utf-8"), add_bos=True, special=True)

    def piece(self, token):
        return self.llm.detokenize([token], special=True).decode("utf-8", errors="replace")

    def text(self, tokens):
        return self.llm.detokenize(tokens, special=True).decode("utf-8", errors="replace")

    def _decode(self, tokens):
        arr = (self.lib.llama_token * len(tokens))(*tokens)
        rc = self.lib.llama_decode(self.ctx, self.lib.llama_batch_get_one(arr, len(tokens)))
        if rc != 0:
            raise RuntimeError(f"llama_decode returned {rc}")
        return self.np.ctypeslib.as_array(self.lib.llama_get_logits_ith(self.ctx, -1), shape=(self.n_vocab,))

    def generate(self, prompt_tokens, n):
        """Greedy tokens (stopping after an end-of-generation token, as a user's run
        would), prompt tok/s, decode tok/s, and the top-1 minus top-2 logit margin at
        every step (a small margin is a near tie that float rounding can flip)."""
        np = self.np
        self.lib.llama_memory_clear(self.lib.llama_get_memory(self.ctx), True)
        t0 = time.perf_counter()
        logits = self._decode(prompt_tokens)
        token = int(np.argmax(logits))
        prompt_s = time.perf_counter() - t0
        tokens, margins = [token], []
        decode_s = 0.0
        while True:
            margins.append(float(logits[token] - np.partition(logits, -2)[-2]))
            if len(tokens) == n or self.lib.llama_vocab_is_eog(self.vocab, token):
                break
            t0 = time.perf_counter()
            logits = self._decode([token])
            token = int(np.argmax(logits))
            decode_s += time.perf_counter() - t0
            tokens.append(token)
        decode_tok_s = (len(tokens) - 1) / decode_s if decode_s > 0 else float("nan")
        return {"tokens": tokens, "margins": margins, "prompt_tok_s": len(prompt_tokens) / prompt_s,
                "decode_tok_s": decode_tok_s}


def write_dequantized(model, out):
    """The model with every tensor dequantized to F32 and the metadata unchanged (but
    the file type), so llama.cpp runs it with exact f32 activations."""
    try:
        import numpy as np
        from gguf import GGMLQuantizationType, GGUFReader, GGUFValueType, GGUFWriter
        from gguf.quants import dequantize
    except ImportError as e:
        fail(f"cannot import gguf ({e}) for the dequantized reference; run scripts/install-llamacpp.sh "
             f"or pass --no-dequantized")
    reader = GGUFReader(str(model))
    arch = reader.fields["general.architecture"].contents()
    writer = GGUFWriter(str(out), arch=arch)
    for name, field in reader.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue  # written by the writer itself
        if name == "general.file_type":
            writer.add_file_type(0)  # all F32
            continue
        sub_type = field.types[1] if field.types[0] == GGUFValueType.ARRAY else None
        writer.add_key_value(name, field.contents(), field.types[0], sub_type=sub_type)
    for t in reader.tensors:
        values = np.asarray(dequantize(t.data, t.tensor_type), dtype=np.float32)
        writer.add_tensor(t.name, values.reshape([int(d) for d in reversed(t.shape)]),
                          raw_dtype=GGMLQuantizationType.F32)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def run_qmvlab(exe, args, what):
    try:
        out = subprocess.run([str(exe)] + args, capture_output=True, text=True)
    except OSError as e:
        fail(f"cannot run {exe}: {e}")
    if out.returncode != 0:
        fail(f"{what} failed (exit {out.returncode}): {' '.join([str(exe)] + args)}\n{out.stderr.strip()}")
    return out.stdout


def qmvlab_tokenize(exe, model, text, add_bos):
    args = ["tokenize", "--model", str(model), "--ids"] + (["--bos"] if add_bos else []) + ["--", text]
    return [int(x) for x in run_qmvlab(exe, args, "qmvlab tokenize").split()]


def qmvlab_decode(exe, model, prompt_tokens, n, threads, plan, tmpdir):
    out_json = Path(tmpdir) / "decode.json"
    out_json.unlink(missing_ok=True)
    run_qmvlab(exe, ["decode", "--model", str(model), "--prompt-tokens", ",".join(map(str, prompt_tokens)),
                     "-n", str(n), "--threads", str(threads), "--temperature", "0", "--json", str(out_json),
                     "--quiet", "--no-peak"] + (["--plan", plan] if plan else []),
               "qmvlab decode")
    try:
        result = json.loads(out_json.read_text())
    except (OSError, json.JSONDecodeError) as e:
        fail(f"qmvlab decode wrote no readable JSON to {out_json}: {e}")
    for key in ("prompt_tokens", "generated_tokens", "decode_tok_s"):
        if key not in result:
            fail(f"qmvlab decode's JSON has no \"{key}\"")
    if result["prompt_tokens"] != prompt_tokens:
        fail(f"qmvlab decode reports prompt tokens {result['prompt_tokens'][:8]}... "
             f"but was given {prompt_tokens[:8]}...")
    return result


def leading_agreement(a, b):
    n = 0
    while n < len(a) and n < len(b) and a[n] == b[n]:
        n += 1
    return n


def median(xs):
    xs = [x for x in xs if x is not None and not math.isnan(x)]
    return statistics.median(xs) if xs else float("nan")


def tokens_main(args):
    """The token comparison through the Python binding (--tokens)."""
    model_arg = args.model[0] if args.model else str(ROOT / "models/SmolLM2-135M-Instruct.Q4_1.gguf")
    if args.model and len(args.model) > 1:
        fail("--tokens compares one --model at a time")
    args.model = model_arg
    if args.n is None:
        args.n = 48
    if args.threads < 1 or args.n < 1 or args.repeats < 1:
        fail("--threads, -n and --repeats must be at least 1")
    use_pinned_library()

    try:
        import llama_cpp
    except ImportError as e:
        fail(f"cannot import llama_cpp ({e}); run scripts/install-llamacpp.sh and use "
             f".venv-llamacpp/bin/python")
    except (OSError, RuntimeError) as e:  # the binding found no library to load
        fail(f"llama_cpp cannot load llama.cpp's library ({e}); scripts/install-peers.sh builds it "
             f"into {PEER_DIR / 'build/bin'}, or set LLAMA_CPP_LIB_PATH")
    model = Path(args.model)
    if not model.is_file():
        fail(f"model {model} not found (scripts/get-model.sh fetches the SmolLM2 one)")
    qmvlab = Path(args.qmvlab)
    if not args.llamacpp_only and not (qmvlab.is_file() and os.access(qmvlab, os.X_OK)):
        fail(f"qmvlab executable {qmvlab} not found (build it, pass --qmvlab, or use --llamacpp-only)")
    prompts = load_prompts(args.prompts) if args.prompts else BUILTIN_PROMPTS
    version = llama_cpp.__version__

    # Tokenize first with a throw-away small context to size the real one.
    n_ctx = args.n_ctx
    lcpp = LlamaCppGreedy(model, args.threads, max(n_ctx, 512), args.seed)
    prompt_tokens = {pid: lcpp.tokenize(text) for pid, text in prompts}
    longest = max(len(t) for t in prompt_tokens.values())
    if any(len(t) == 0 for t in prompt_tokens.values()):
        fail("a prompt tokenizes to nothing")
    need = longest + args.n + 1
    if n_ctx == 0:
        n_ctx = max(512, need)
    elif n_ctx < need:
        fail(f"--n-ctx {n_ctx} is too small for the longest prompt ({longest} tokens) plus {args.n}")
    if n_ctx > 512:
        del lcpp
        lcpp = LlamaCppGreedy(model, args.threads, n_ctx, args.seed)

    machine = commit = ""
    if not args.llamacpp_only:
        machine = run_qmvlab(qmvlab, ["list", "--machine"], "qmvlab list --machine").strip()
        # The commit the binary was built from ("qmvlab <commit>"), which may not be this checkout's.
        commit = run_qmvlab(qmvlab, ["--version"], "qmvlab --version").split()[-1]
    else:
        try:
            commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short=12", "HEAD"],
                                    capture_output=True, text=True, check=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            commit = "unknown"

    print(f"llama-cpp-python {version}; model {model.name}; {args.threads} threads; n={args.n}; "
          f"{args.repeats} repeats; add_bos={lcpp.add_bos}", flush=True)
    results = []
    with tempfile.TemporaryDirectory() as tmpdir:
        dequantized = {}
        if not args.no_dequantized:
            f32_model = Path(tmpdir) / "dequantized-f32.gguf"
            print(f"  writing the dequantized reference model {f32_model}", flush=True)
            write_dequantized(model, f32_model)
            ref = LlamaCppGreedy(f32_model, args.threads, n_ctx, args.seed, f32_kv_cache=True)
            for pid, text in prompts:
                if ref.tokenize(text) != prompt_tokens[pid]:
                    fail(f"prompt {pid}: the dequantized model tokenizes differently")
                dequantized[pid] = ref.generate(prompt_tokens[pid], args.n)
            del ref
            f32_model.unlink()
        for pid, text in prompts:
            ptoks = prompt_tokens[pid]
            row = {"id": pid, "text": text, "prompt_tokens": ptoks}
            if not args.llamacpp_only:
                ours = qmvlab_tokenize(qmvlab, model, text, lcpp.add_bos)
                row["tokenizer_match"] = ours == ptoks
                row["qmvlab_prompt_tokens"] = ours
            lruns, qruns = [], []
            for _ in range(args.repeats):
                lruns.append(lcpp.generate(ptoks, args.n))
                if not args.llamacpp_only:
                    qruns.append(qmvlab_decode(qmvlab, model, ptoks, args.n, args.threads, args.plan, tmpdir))
            # Greedy decoding is deterministic: repeats that differ would make the
            # comparison meaningless, so they are an error, not noise.
            if any(r["tokens"] != lruns[0]["tokens"] for r in lruns):
                fail(f"prompt {pid}: llama.cpp's greedy tokens differ between repeats")
            if any(r["generated_tokens"] != qruns[0]["generated_tokens"] for r in qruns):
                fail(f"prompt {pid}: qmvlab's greedy tokens differ between repeats")
            row["llamacpp"] = lruns[0]
            row["dequantized"] = dequantized.get(pid)
            row["llamacpp_decode_tok_s"] = median([r["decode_tok_s"] for r in lruns])
            row["llamacpp_prompt_tok_s"] = median([r["prompt_tok_s"] for r in lruns])
            if qruns:
                ours = qruns[0]["generated_tokens"]
                theirs = lruns[0]["tokens"]
                row["qmvlab_tokens"] = ours
                row["agree"] = leading_agreement(theirs, ours)
                if row["dequantized"]:
                    row["agree_dequantized"] = leading_agreement(row["dequantized"]["tokens"], ours)
                row["qmvlab_decode_tok_s"] = median([r["decode_tok_s"] for r in qruns])
                row["qmvlab_prompt_tok_s"] = median([r.get("prompt_tok_s", float("nan")) for r in qruns])
                row["ratio"] = row["qmvlab_decode_tok_s"] / row["llamacpp_decode_tok_s"]
                row["plan"] = qruns[0].get("plan", "")
            results.append(row)
            print(f"  {pid}: done", flush=True)

    print_report(results, lcpp, args)

    if args.out:
        write_csv(args.out, results, model, args, machine, version, commit)
    if args.golden:
        write_golden(args.golden, results, lcpp, model, args, version)
    # The bar the golden test sets: 32 tokens (or all there are) equal to one of the references.
    if not args.llamacpp_only and any(best_agreement(r) < min(32, len(r["llamacpp"]["tokens"])) for r in results):
        sys.exit(1)


def best_agreement(row):
    return max(row["agree"], row.get("agree_dequantized", 0))


def short(text, width=60):
    text = text.replace("\n", "\\n")
    return text if len(text) <= width else text[:width - 3] + "..."


def divergence(lcpp, ref, ours, k):
    """Where `ours` leaves the reference run `ref`: both tokens' text and the
    reference's top-2 logit margin there."""
    theirs = ref["tokens"]
    if k == len(theirs) and k == len(ours):
        return "none"
    a = repr(lcpp.piece(theirs[k])) if k < len(theirs) else "(end)"
    b = repr(lcpp.piece(ours[k])) if k < len(ours) else "(end)"
    margin = f", margin {ref['margins'][k]:.3f}" if k < len(theirs) else ""
    return f"at {k}: {a} / {b}{margin}".replace("|", "\\|")


def print_report(results, lcpp, args):
    if args.llamacpp_only:
        print("\n| prompt | prompt tokens | llama.cpp prompt tok/s | llama.cpp decode tok/s | generated "
              "| same greedy tokens on dequantized weights |")
        print("|---|---|---|---|---|---|")
        for r in results:
            toks = r["llamacpp"]["tokens"]
            same = (f"{leading_agreement(toks, r['dequantized']['tokens'])}/{len(toks)}"
                    if r["dequantized"] else "-")
            print(f"| {r['id']} | {len(r['prompt_tokens'])} | {r['llamacpp_prompt_tok_s']:.1f} | "
                  f"{r['llamacpp_decode_tok_s']:.1f} | {len(toks)} | {same} |")
        print()
        for r in results:
            margins = r["llamacpp"]["margins"][:32]
            print(f"{r['id']}: (smallest top-2 logit margin in the first {len(margins)}: {min(margins):.3f})\n"
                  f"  {short(r['text'], 200)}\n  => {lcpp.text(r['llamacpp']['tokens'])!r}")
        return
    has_deq = all(r["dequantized"] for r in results)
    print("\n| prompt | tokenizer | agree | first divergence (llama.cpp / qmvlab) "
          + ("| agree, dequantized | first divergence, dequantized " if has_deq else "")
          + "| llama.cpp tok/s | qmvlab tok/s | qmvlab / llama.cpp |")
    print("|---|---|---|---|" + ("---|---|" if has_deq else "") + "---|---|---|")
    for r in results:
        theirs, ours = r["llamacpp"]["tokens"], r["qmvlab_tokens"]
        cells = [r["id"], "same" if r["tokenizer_match"] else "DIFFERENT", f"{r['agree']}/{len(theirs)}",
                 divergence(lcpp, r["llamacpp"], ours, r["agree"])]
        if has_deq:
            cells += [f"{r['agree_dequantized']}/{len(r['dequantized']['tokens'])}",
                      divergence(lcpp, r["dequantized"], ours, r["agree_dequantized"])]
        cells += [f"{r['llamacpp_decode_tok_s']:.1f}", f"{r['qmvlab_decode_tok_s']:.1f}", f"{r['ratio']:.2f}"]
        print("| " + " | ".join(cells) + " |")
    ratios = [r["ratio"] for r in results if r["ratio"] > 0 and not math.isnan(r["ratio"])]
    geo = math.exp(sum(map(math.log, ratios)) / len(ratios)) if ratios else float("nan")
    print(f"\nminimum agreement with llama.cpp: {min(r['agree'] for r in results)} tokens"
          + (f"; with llama.cpp on dequantized weights: {min(r['agree_dequantized'] for r in results)} tokens"
             if has_deq else "")
          + f"\ntokenizers agree on {sum(r['tokenizer_match'] for r in results)}/{len(results)} prompts"
          f"\ngeometric-mean decode speed qmvlab / llama.cpp: {geo:.2f} ({args.threads} threads, "
          f"medians of {args.repeats})")
    print(f"qmvlab plan: {results[0].get('plan', '')}")


CSV_FIELDS = ["model", "prompt_id", "threads", "n", "repeats", "prompt_tokens", "tokenizer_match", "agree_tokens",
              "agree_tokens_dequantized", "llamacpp_decode_tok_s", "qmvlab_decode_tok_s", "ratio",
              "llamacpp_prompt_tok_s", "qmvlab_prompt_tok_s", "machine", "llama_cpp_version", "qmvlab_commit"]


def write_csv(path, results, model, args, machine, version, commit):
    p = Path(path)
    new = not p.exists() or p.stat().st_size == 0
    with open(p, "a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_FIELDS)
        if new:
            w.writeheader()
        for r in results:
            both = "agree" in r
            w.writerow({
                "model": model.name, "prompt_id": r["id"], "threads": args.threads, "n": args.n,
                "repeats": args.repeats, "prompt_tokens": len(r["prompt_tokens"]),
                "tokenizer_match": int(r["tokenizer_match"]) if both else "",
                "agree_tokens": r["agree"] if both else "",
                "agree_tokens_dequantized": r.get("agree_dequantized", ""),
                "llamacpp_decode_tok_s": f"{r['llamacpp_decode_tok_s']:.2f}",
                "qmvlab_decode_tok_s": f"{r['qmvlab_decode_tok_s']:.2f}" if both else "",
                "ratio": f"{r['ratio']:.3f}" if both else "",
                "llamacpp_prompt_tok_s": f"{r['llamacpp_prompt_tok_s']:.2f}",
                "qmvlab_prompt_tok_s": f"{r['qmvlab_prompt_tok_s']:.2f}" if both else "",
                "machine": machine, "llama_cpp_version": version, "qmvlab_commit": commit})
    print(f"appended {len(results)} rows to {path}")


def write_golden(path, results, lcpp, model, args, version):
    def run(ref):
        return {"generated_tokens": ref["tokens"],
                # top-1 minus top-2 logit at each step: where a divergence is a near tie
                "top2_margins": [round(m, 4) for m in ref["margins"]],
                "generated_text": lcpp.text(ref["tokens"])}

    golden = {
        "description": "llama.cpp greedy decoding (argmax, no penalties) through llama-cpp-python, written by "
                       "scripts/compare_llamacpp.py --golden. Per prompt: the run on the model as it is, and "
                       "under \"dequantized\" the run on the same weights dequantized to F32 with an F32 KV cache "
                       "(llama.cpp with exact activations)",
        "model_file": model.name,
        "model_sha256": sha256_of(model),
        "llama_cpp_python_version": version,
        "n": args.n,
        "threads": args.threads,
        "add_bos": lcpp.add_bos,
        "prompts": [dict({"id": r["id"], "text": r["text"], "prompt_tokens": r["prompt_tokens"]},
                         **run(r["llamacpp"]), **({"dequantized": run(r["dequantized"])} if r["dequantized"] else {}))
                    for r in results],
    }
    # One key per line and each list on one line: diffs of a regenerated file stay readable.
    lines = []
    for key, value in golden.items():
        if key != "prompts":
            lines.append(f" {json.dumps(key)}: {json.dumps(value, ensure_ascii=False)}")
    entries = [" {\n" + ",\n".join(f"  {json.dumps(k)}: {json.dumps(v, ensure_ascii=False)}" for k, v in p.items())
               + "\n }" for p in golden["prompts"]]
    lines.append(' "prompts": [\n' + ",\n".join(entries) + "\n ]")
    Path(path).write_text("{\n" + ",\n".join(lines) + "\n}\n", encoding="utf-8")
    print(f"wrote {path}")


# ---------------------------------------------------------------------------------
# Timing mode: llama-bench against qmvlab decode.

PEER_DIR = ROOT / ".peers/llama.cpp"
DEFAULT_MODELS = ["models/SmolLM2-135M-Instruct.Q4_1.gguf", "models/SmolLM2-135M-Instruct.Q4_K_M.gguf",
                  "models/synthetic-tinyllama-1.1b-q4_K_m.gguf"]
TIMING_FIELDS = ["machine", "cpu_model", "qmvlab_commit", "peer", "model", "model_file", "weights", "threads",
                 "tokens", "rounds", "qmvlab_tok_s", "llamacpp_tok_s", "llamacpp_norepack_tok_s", "ratio",
                 "roofline_tok_s", "qmvlab_roofline_pct", "llamacpp_roofline_pct", "qmvlab_plan", "command"]
# llama.cpp's file types (enum llama_ftype), by the names its quantize tool takes.
FILE_TYPES = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K",
              11: "Q3_K_S", 12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S", 17: "Q5_K_M",
              18: "Q6_K", 32: "BF16"}


def gguf_metadata(path):
    """The scalar metadata of a GGUF file (arrays skipped), read with the stdlib so the
    timing mode needs no package. None when the file is not GGUF."""
    scalar = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
    with open(path, "rb") as f:
        def read(fmt):
            data = f.read(struct.calcsize(fmt))
            if len(data) != struct.calcsize(fmt):
                raise ValueError("truncated")
            return struct.unpack(fmt, data)[0]

        def string():
            return f.read(read("<Q")).decode("utf-8", "replace")

        def value(vtype):
            if vtype == 8:
                return string()
            if vtype == 9:
                item, count = read("<I"), read("<Q")
                if item in scalar:
                    f.seek(struct.calcsize(scalar[item]) * count, 1)
                else:
                    for _ in range(count):
                        value(item)
                return None
            if vtype not in scalar:
                raise ValueError(f"unknown metadata value type {vtype}")
            return read(scalar[vtype])

        if f.read(4) != b"GGUF":
            return None
        try:
            if read("<I") < 2:
                return None
            read("<Q")  # tensor count
            meta = {}
            for _ in range(read("<Q")):
                key = string()
                meta[key] = value(read("<I"))
            return meta
        except (ValueError, struct.error, UnicodeDecodeError):
            return None


def weights_of(meta, model_type):
    """The model's quantization: its GGUF file type, else what llama-bench calls it
    ("llama 256M Q4_K - Medium" -> Q4_K_M)."""
    if meta.get("general.file_type") in FILE_TYPES:
        return FILE_TYPES[meta["general.file_type"]]
    name = " ".join(model_type.split()[2:])
    for long, short in ((" - Small", "_S"), (" - Medium", "_M"), (" - Large", "_L")):
        name = name.replace(long, short)
    return name or "unknown"


def tail(text, lines=8):
    return "\n".join(text.strip().splitlines()[-lines:])


def run_tool(cmd, what, library_path=None):
    env = None
    if library_path:
        env = dict(os.environ, LD_LIBRARY_PATH=":".join(filter(None, [library_path, os.environ.get("LD_LIBRARY_PATH")])))
    try:
        return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=env)
    except OSError as e:
        fail(f"cannot run {what} ({cmd[0]}): {e}", EXIT_FAILED)


def llama_bench_command(exe, model, n, threads, repack, device):
    """llama-bench's token-generation command: on the CPU with its weight repacking on or
    off, on CUDA with every layer offloaded (-ngl 99; repacking is a CPU feature)."""
    cmd = [exe, "-m", model, "-p", "0", "-n", n, "-t", threads, "-r", "1"]
    cmd += ["-ngl", "99"] if device == "cuda" else ["--repack", int(repack)]
    return cmd + ["-o", "json"]


def llama_bench(exe, model, n, threads, repack, device="cpu", library_path=None):
    """One llama-bench token-generation run: (tok/s, its model_type)."""
    cmd = llama_bench_command(exe, model, n, threads, repack, device)
    out = run_tool(cmd, "llama-bench", library_path)
    if out.returncode != 0:
        fail(f"llama-bench failed (exit {out.returncode}): {shlex.join(map(str, cmd))}\n{tail(out.stderr)}",
             EXIT_FAILED)
    try:
        rows = json.loads(out.stdout)
        row = next(r for r in rows if r.get("n_prompt") == 0 and r.get("n_gen") == n)
        return float(row["avg_ts"]), str(row.get("model_type", ""))
    except (json.JSONDecodeError, StopIteration, KeyError, TypeError, ValueError):
        fail(f"llama-bench printed no tg{n} result: {shlex.join(map(str, cmd))}\n{tail(out.stdout + out.stderr)}",
             EXIT_FAILED)


def qmvlab_decode_command(exe, model, token, n, threads, plan, device, out_json, out_csv):
    # No plan given: qmvlab's default command, the plan it picks from this machine's measurements.
    return ([exe, "decode", "--model", model, "--prompt-tokens", token, "-n", n, "--threads", threads]
            + (["--device", device] if device != "cpu" else [])
            + ["--ignore-eos", "--quiet", "--json", out_json, "--out", out_csv] + (["--plan", plan] if plan else []))


def qmvlab_timed_decode(exe, model, token, n, threads, plan, tmpdir, device="cpu"):
    """One `qmvlab decode` run: its JSON and its results CSV row (which names the
    machine, the CPU, the GPU and the commit the binary was built from)."""
    out_json, out_csv = Path(tmpdir) / "decode.json", Path(tmpdir) / "decode.csv"
    out_json.unlink(missing_ok=True)
    out_csv.unlink(missing_ok=True)
    cmd = qmvlab_decode_command(exe, model, token, n, threads, plan, device, out_json, out_csv)
    out = run_tool(cmd, "qmvlab decode")
    if out.returncode != 0:
        fail(f"qmvlab decode failed (exit {out.returncode}): {shlex.join(map(str, cmd))}\n"
             f"{tail(out.stderr or out.stdout)}", EXIT_FAILED)
    try:
        result = json.loads(out_json.read_text())
        with open(out_csv, newline="") as f:
            row = next(csv.DictReader(f))
    except (OSError, json.JSONDecodeError, StopIteration) as e:
        fail(f"qmvlab decode wrote no readable results ({out_json}, {out_csv}): {e}", EXIT_FAILED)
    missing = [k for k in ("decode_tok_s", "bytes_per_token", "peak_gbps", "plan_kernels") if k not in result]
    if missing:
        fail(f"qmvlab decode's JSON has no {', '.join(missing)}", EXIT_FAILED)
    return result, row


def peer_description(llama_bench_exe):
    """The contents of the pinned build's `commit` file (.peers/llama.cpp/commit)."""
    for d in Path(llama_bench_exe).resolve().parents:
        if (d / "commit").is_file():
            return (d / "commit").read_text().strip()
    return "unknown"


def gpu_machine(decode_row):
    """The results folder of the GPU a CUDA decode ran on: its name as scripts/gpu-run.sh
    spells it ("NVIDIA H200 sm_90 132SMs ..." -> nvidia-h200)."""
    name = decode_row.get("gpu", "").split(" sm_")[0].lower()
    return "-".join(w for w in "".join(c if c.isalnum() else " " for c in name).split()) or "unknown-gpu"


def prompt_token(meta):
    """The one-token prompt qmvlab decodes from: the model's BOS token, else 0."""
    token = (meta or {}).get("tokenizer.ggml.bos_token_id")
    return token if isinstance(token, int) and token >= 0 else 0


def print_dry_run(args, models, n, bench, qmvlab):
    """The commands one call would run, round by round, and where its row would go."""
    for m in models:
        token = prompt_token(gguf_metadata(m) if m.is_file() else None)
        env = f"LD_LIBRARY_PATH={shlex.quote(args.llama_bench_libs)}:... " if args.llama_bench_libs else ""
        for r in range(args.rounds):
            print(f"# {m.name}, round {r + 1}/{args.rounds}")
            print(env + shlex.join(map(str, llama_bench_command(bench, m, n, args.threads, True, args.device))))
            if args.device == "cpu":
                print(env + shlex.join(map(str, llama_bench_command(bench, m, n, args.threads, False, args.device))))
            print(shlex.join(map(str, qmvlab_decode_command(qmvlab, m, token, n, args.threads, args.plan, args.device,
                                                            "DECODE.json", "DECODE.csv"))))
    print(f"# medians appended to {args.out or 'results/<machine>/decode-vs-llamacpp.csv'}")


def timing_main(args):
    n = 64 if args.n is None else args.n
    if args.threads < 1 or n < 2 or args.rounds < 1:
        fail("--threads and --rounds must be at least 1, -n at least 2")
    bench = Path(args.llama_bench)
    if args.dry_run:
        models = [Path(m) for m in args.model] if args.model else [ROOT / m for m in DEFAULT_MODELS]
        print_dry_run(args, models, n, bench, Path(args.qmvlab))
        return
    if not bench.is_file():
        print(f"compare_llamacpp: peer build missing ({bench}; scripts/install-peers.sh builds it): skipped",
              file=sys.stderr)
        sys.exit(EXIT_SKIPPED)
    qmvlab = Path(args.qmvlab)
    if not (qmvlab.is_file() and os.access(qmvlab, os.X_OK)):
        fail(f"qmvlab executable {qmvlab} not found (build it, or pass --qmvlab)")

    if args.model:
        models = [Path(m) for m in args.model]
    else:
        models = [ROOT / m for m in DEFAULT_MODELS if (ROOT / m).is_file()]
        for m in DEFAULT_MODELS:
            if not (ROOT / m).is_file():
                progress(f"{m} not there: not measured (scripts/get-model.sh, qmvlab make-model make it)")
        if not models:
            fail("none of the default models is there: pass --model (scripts/get-model.sh fetches one)")
    metas = {}
    for m in models:
        if not m.is_file():
            fail(f"model {m} not found")
        meta = gguf_metadata(m)
        if meta is None:
            fail(f"model {m}: not a GGUF file")
        metas[m] = meta

    machine = run_tool([qmvlab, "list", "--machine"], "qmvlab list").stdout.strip() or "unknown"
    out_path = Path(args.out) if args.out else ROOT / "results" / machine / "decode-vs-llamacpp.csv"
    check_csv_header(out_path)
    peer = peer_description(bench)
    progress(f"{peer}; {len(models)} model(s); {args.threads} threads; {n} tokens; {args.rounds} rounds")

    rows = []
    with tempfile.TemporaryDirectory() as tmpdir:
        for m in models:
            meta = metas[m]
            token = prompt_token(meta)
            start = time.monotonic()
            on, off, ours, roof = [], [], [], []
            model_type, first = "", None
            for r in range(args.rounds):
                speed, model_type = llama_bench(bench, m, n, args.threads, True, args.device, args.llama_bench_libs)
                on.append(speed)
                if args.device == "cpu":
                    off.append(llama_bench(bench, m, n, args.threads, False, library_path=args.llama_bench_libs)[0])
                result, decode_row = qmvlab_timed_decode(qmvlab, m, token, n, args.threads, args.plan, tmpdir,
                                                         args.device)
                first = first or (result, decode_row)
                ours.append(result["decode_tok_s"])
                if result["peak_gbps"] > 0 and result["bytes_per_token"] > 0:
                    roof.append(result["peak_gbps"] * 1e9 / result["bytes_per_token"])
                no_repack = f" (no repack {off[-1]:.2f})" if off else ""
                progress(f"  {m.name} round {r + 1}/{args.rounds}: llama.cpp {on[-1]:.2f} tok/s{no_repack}, "
                         f"qmvlab {ours[-1]:.2f} tok/s")
            q, l, lo, rf = median(ours), median(on), median(off) if off else math.nan, median(roof)
            shown = m.resolve().relative_to(ROOT) if m.resolve().is_relative_to(ROOT) else m
            command = shlex.join(["scripts/compare_llamacpp.py", "--model", str(shown), "--threads", str(args.threads),
                                  "-n", str(n), "--rounds", str(args.rounds)]
                                 + (["--device", args.device] if args.device != "cpu" else [])
                                 + (["--plan", args.plan] if args.plan else []))
            rows.append({
                "machine": gpu_machine(first[1]) if args.device == "cuda" else machine, "cpu_model": first[1].get("cpu_model", ""),
                "qmvlab_commit": first[1].get("git_commit", ""), "peer": peer,
                "model": first[1].get("model") or meta.get("general.name") or m.stem, "model_file": m.name,
                "weights": weights_of(meta, model_type), "threads": args.threads, "tokens": n,
                "rounds": args.rounds, "qmvlab_tok_s": f"{q:.3f}", "llamacpp_tok_s": f"{l:.3f}",
                "llamacpp_norepack_tok_s": f"{lo:.3f}" if not math.isnan(lo) else "", "ratio": f"{q / l:.3f}" if l > 0 else "",
                "roofline_tok_s": f"{rf:.3f}" if not math.isnan(rf) else "",
                "qmvlab_roofline_pct": f"{100 * q / rf:.2f}" if rf > 0 else "",
                "llamacpp_roofline_pct": f"{100 * l / rf:.2f}" if rf > 0 else "",
                "qmvlab_plan": first[0]["plan_kernels"], "command": command})
            # Each model's row as soon as it is measured: a later failure keeps it.
            append_csv(out_path, rows[-1:])
            progress(f"{m.name}: {time.monotonic() - start:.0f} s")

    print("| model | weights | threads | qmvlab tok/s | llama.cpp tok/s | llama.cpp, no repack | qmvlab / llama.cpp "
          "| roofline tok/s | qmvlab % | llama.cpp % |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['model_file']} | {r['weights']} | {r['threads']} | {r['qmvlab_tok_s']} | {r['llamacpp_tok_s']} "
              f"| {r['llamacpp_norepack_tok_s']} | {r['ratio']} | {r['roofline_tok_s']} | {r['qmvlab_roofline_pct']} "
              f"| {r['llamacpp_roofline_pct']} |")
    print(f"medians of {args.rounds} alternating rounds of {n} tokens; {peer}; appended to {out_path}")


def check_csv_header(path):
    """An existing --out must hold this mode's columns: rows are appended to it."""
    if path.is_file() and path.stat().st_size > 0:
        with open(path, newline="") as f:
            header = next(csv.reader(f), [])
        if header != TIMING_FIELDS:
            fail(f"{path}: its header is not this script's ({','.join(TIMING_FIELDS[:4])},...); "
                 f"pass another --out")


def append_csv(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    new = not path.exists() or path.stat().st_size == 0
    with open(path, "a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=TIMING_FIELDS)
        if new:
            w.writeheader()
        w.writerows(rows)


def use_pinned_library():
    """Points llama-cpp-python at the pinned build's libraries (it reads
    LLAMA_CPP_LIB_PATH when it loads), unless the caller chose a library already."""
    lib_dir = PEER_DIR / "build/bin"
    if "LLAMA_CPP_LIB_PATH" not in os.environ and (lib_dir / "libllama.so").exists():
        os.environ["LLAMA_CPP_LIB_PATH"] = str(lib_dir)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", action="store_true",
                    help="compare greedy tokens through the Python binding instead of timing with llama-bench")
    ap.add_argument("--model", action="append",
                    help="GGUF model; timing: repeatable (default: those of the three standard models that exist); "
                         "--tokens: one (default: SmolLM2-135M-Instruct Q4_1)")
    ap.add_argument("--threads", type=int, default=2, help="threads for both engines (default 2)")
    ap.add_argument("-n", "--tokens-per-round", dest="n", type=int,
                    help="tokens to generate (default: 64 timing, 48 --tokens)")
    ap.add_argument("--rounds", type=int, default=3, help="timing: alternating rounds (default 3)")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                    help="timing: where both engines decode (cuda: llama-bench -ngl 99, qmvlab decode --device cuda; "
                         "the llama-bench of scripts/install-peers.sh --isa cuda)")
    ap.add_argument("--dry-run", action="store_true", help="timing: print the commands a run would make, run none")
    ap.add_argument("--qmvlab", default=str(ROOT / "build/qmvlab"), help="qmvlab executable (default build/qmvlab)")
    ap.add_argument("--llama-bench", default=str(PEER_DIR / "build/bin/llama-bench"),
                    help="timing: llama-bench executable (default: the pinned build's)")
    ap.add_argument("--llama-bench-libs", metavar="DIRS",
                    help="timing: folders put before LD_LIBRARY_PATH for llama-bench alone (a bundled peer's "
                         "libraries, which must not shadow qmvlab's)")
    ap.add_argument("--plan", default=None,
                    help="passed to qmvlab decode --plan (default: none, qmvlab's default plan)")
    ap.add_argument("--out", help="append CSV rows to this file (timing default: "
                                  "results/<machine>/decode-vs-llamacpp.csv; --tokens: none)")
    tokens = ap.add_argument_group("--tokens mode")
    tokens.add_argument("--prompts", help="prompts file (.json list, or one prompt per line with \\n escapes); "
                                          "default: a built-in set of 5")
    tokens.add_argument("--repeats", type=int, default=3, help="alternating runs per engine and prompt (default 3)")
    tokens.add_argument("--n-ctx", type=int, default=0, help="llama.cpp context (default: longest prompt + n, "
                                                             "at least 512)")
    tokens.add_argument("--seed", type=int, default=1234, help="llama.cpp seed (unused by greedy decoding)")
    tokens.add_argument("--llamacpp-only", action="store_true", help="run only the llama.cpp side")
    tokens.add_argument("--no-dequantized", action="store_true",
                        help="skip the second reference (llama.cpp on the weights dequantized to F32)")
    tokens.add_argument("--golden", help="write llama.cpp's prompt and greedy tokens per prompt to this JSON file")
    args = ap.parse_args()
    if args.tokens:
        tokens_main(args)
    else:
        timing_main(args)


if __name__ == "__main__":
    main()
