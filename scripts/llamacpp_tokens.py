#!/usr/bin/env python3
"""qmvlab's greedy tokens against llama.cpp's, on the same GGUF file and prompts.

Greedy decode of qmvlab against llama.cpp through llama.cpp's Python binding,
llama-cpp-python, which scripts/install-llamacpp.sh installs over the same pinned build
as scripts/compare_llamacpp.py's llama-bench (the binding's library path,
LLAMA_CPP_LIB_PATH, is pointed at .peers/llama.cpp/build/bin when it is not set). For
each prompt, llama.cpp tokenizes it (BOS as the model's metadata says, special tokens
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
--golden FILE records llama.cpp's tokens (tests/llamacpp_golden_test.py replays them).
Exit status: 0 done, 1 a tool failed or a prompt's first 32 tokens (or all there are)
match neither reference, 2 bad input. It runs with the llama.cpp venv's Python:
  .venv-llamacpp/bin/python scripts/llamacpp_tokens.py --model models/M.gguf
(scripts/compare_llamacpp.py --tokens, its former name, still runs it.)
"""
import argparse
import csv
import hashlib
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import llamacpp_tools  # noqa: E402
from llamacpp_tools import PEER_DIR, ROOT, add_shared_options, fail, median, run_checked  # noqa: E402

llamacpp_tools.TOOL = "llamacpp_tokens"

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
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


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
    return run_checked([exe] + args, what).stdout


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


def tokens_main(args):
    """The token comparison through the Python binding."""
    if len(args.model) > 1:
        fail("compares one --model at a time")
    args.model = args.model[0]
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
                       "scripts/llamacpp_tokens.py --golden. Per prompt: the run on the model as it is, and "
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


def use_pinned_library():
    """Points llama-cpp-python at the pinned build's libraries (it reads
    LLAMA_CPP_LIB_PATH when it loads), unless the caller chose a library already."""
    lib_dir = PEER_DIR / "build/bin"
    if "LLAMA_CPP_LIB_PATH" not in os.environ and (lib_dir / "libllama.so").exists():
        os.environ["LLAMA_CPP_LIB_PATH"] = str(lib_dir)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", action="append",
                    help="GGUF model, one (default: models/SmolLM2-135M-Instruct.Q4_1.gguf)")
    ap.add_argument("-n", "--tokens-per-round", dest="n", type=int, default=48,
                    help="tokens to generate per prompt (default 48)")
    add_shared_options(ap)
    ap.add_argument("--out", help="append one CSV row per prompt to this file (default: none)")
    ap.add_argument("--prompts", help="prompts file (.json list, or one prompt per line with \\n escapes); "
                                      "default: a built-in set of 5")
    ap.add_argument("--repeats", type=int, default=3, help="alternating runs per engine and prompt (default 3)")
    ap.add_argument("--n-ctx", type=int, default=0, help="llama.cpp context (default: longest prompt + n, "
                                                         "at least 512)")
    ap.add_argument("--seed", type=int, default=1234, help="llama.cpp seed (unused by greedy decoding)")
    ap.add_argument("--llamacpp-only", action="store_true", help="run only the llama.cpp side")
    ap.add_argument("--no-dequantized", action="store_true",
                    help="skip the second reference (llama.cpp on the weights dequantized to F32)")
    ap.add_argument("--golden", help="write llama.cpp's prompt and greedy tokens per prompt to this JSON file")
    args = ap.parse_args()
    args.model = args.model or [str(ROOT / "models/SmolLM2-135M-Instruct.Q4_1.gguf")]
    tokens_main(args)


if __name__ == "__main__":
    main()
