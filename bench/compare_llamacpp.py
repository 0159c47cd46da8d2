#!/usr/bin/env python3
"""kvevict against llama.cpp on the same GGUF, threads and context, side by side.

    bench/compare_llamacpp.py [--model GGUF] [--threads 2] [--rounds 3] [--build build]
                              [--prompt-file TEXT] [--decode-tokens 32] [--cli KVEVICT]

Needs the optional Python package llama-cpp-python (never a CI dependency); without it the script
says so and exits 0. Each round runs kvevict and then llama.cpp, each in a fresh process:
  prefill 512 and 2048 random tokens (tokens/s), decode `--decode-tokens` tokens one at a time at a
  4096-token context (tokens/s), and the peak RSS of a generation of 32 tokens after the prompt
  file (default: a generated text of about 4000 tokens), measured with wait4 on the process.
kvevict's timings come from `bench_decoder --json --no-machine`, its RSS from `kvevict generate`.
The medians over the rounds and the kvevict / llama.cpp ratios are printed (for speeds above 1 is
kvevict faster; for RSS below 1 is kvevict smaller). The figures are only meaningful on a quiet
machine: the script prints the load average before and after.
"""
import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile

DEFAULT_MODEL = os.path.expanduser("~/.cache/kvevict/models/SmolLM2-135M-Instruct.Q4_1.gguf")
PREFILL = (512, 2048)
CONTEXT = 4096


def llama_worker(args):
    """Runs in a child process: one llama.cpp measurement, printed as JSON."""
    import time
    import llama_cpp

    n_ctx = max(CONTEXT + args.decode_tokens + 8, 4096 + 64)
    if args.worker == "rss":  # the context the prompt needs, as kvevict sizes its cache to the tokens seen
        vocab_only = llama_cpp.Llama(model_path=args.model, vocab_only=True, verbose=False)
        text = open(args.prompt_file, encoding="utf-8").read()
        n_ctx = len(vocab_only.tokenize(text.encode("utf-8"), add_bos=True)) + 32 + 8
        del vocab_only
    llm = llama_cpp.Llama(model_path=args.model, n_ctx=n_ctx, n_threads=args.threads, n_threads_batch=args.threads,
                          n_batch=512, verbose=False)
    vocab = llm.n_vocab()
    rng = random.Random(1)
    out = {}
    if args.worker == "timing":
        for n in PREFILL:
            tokens = [rng.randrange(vocab) for _ in range(n)]
            llm.reset()
            t = time.perf_counter()
            llm.eval(tokens)
            out[f"prefill_{n}_tok_s"] = n / (time.perf_counter() - t)
        llm.reset()
        llm.eval([rng.randrange(vocab) for _ in range(CONTEXT)])
        t = time.perf_counter()
        for _ in range(args.decode_tokens):  # one token per call, as a decode step; the id does not matter
            llm.eval([1])
        out["decode_tok_s"] = args.decode_tokens / (time.perf_counter() - t)
    else:  # rss: the prompt file plus 32 greedy tokens
        text = open(args.prompt_file, encoding="utf-8").read()
        tokens = llm.tokenize(text.encode("utf-8"), add_bos=True)
        llm.eval(tokens)
        for _ in range(32):
            token = llm.sample(temp=0.0)
            llm.eval([token])
        out["prompt_tokens"] = len(tokens)
    print(json.dumps(out))


def spawn_rss(cmd):
    """Runs cmd to completion and returns (stdout, peak RSS MiB) of exactly that process."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, text=True)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if proc.returncode != 0:
            sys.exit(f"compare_llamacpp: {' '.join(cmd)} failed ({proc.returncode}):\n{err.read()}")
        return out.read(), usage.ru_maxrss / 1024.0


def last_json(stdout):
    for line in reversed(stdout.strip().splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    sys.exit("compare_llamacpp: no JSON line in:\n" + stdout)


def default_prompt(path):
    sentence = ("The committee met on a grey morning to review the harbour accounts, and each member read "
                "a different ledger aloud while the clerk wrote the totals in a narrow book. ")
    with open(path, "w", encoding="utf-8") as f:
        f.write(sentence * 135)  # about 4000 tokens with the SmolLM2 tokenizer


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=DEFAULT_MODEL)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--build", default="build", help="kvevict build folder (bench/bench_decoder, kvevict)")
    p.add_argument("--cli", default=None,
                   help="the kvevict binary for the RSS run (default BUILD/kvevict; a -DKVEVICT_CUDA=OFF build "
                        "does not map the CUDA libraries at start)")
    p.add_argument("--prompt-file", default=None)
    p.add_argument("--decode-tokens", type=int, default=32)
    p.add_argument("--worker", choices=["timing", "rss"], help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        return llama_worker(args)

    try:
        import llama_cpp  # noqa: F401
    except Exception as e:  # not installed, or built for another Python
        print(f"compare_llamacpp: skipped: the Python package llama-cpp-python is not importable ({e}).\n"
              "Install it (pip install llama-cpp-python; it builds llama.cpp) to run the side-by-side benchmark.")
        return 0
    if not os.path.exists(args.model):
        sys.exit(f"compare_llamacpp: {args.model}: no such file (--model)")
    bench = os.path.join(args.build, "bench", "bench_decoder")
    cli = args.cli or os.path.join(args.build, "kvevict")
    for exe in (bench, cli):
        if not os.access(exe, os.X_OK):
            sys.exit(f"compare_llamacpp: {exe} not found; build the targets bench_decoder and kvevict (--build)")
    tmp = tempfile.mkdtemp(prefix="kvevict_vs_llamacpp_")
    prompt = args.prompt_file or os.path.join(tmp, "prompt.txt")
    if not args.prompt_file:
        default_prompt(prompt)

    me = os.path.abspath(__file__)
    worker = [sys.executable, me, "--model", args.model, "--threads", str(args.threads), "--decode-tokens",
              str(args.decode_tokens), "--prompt-file", prompt]
    kv_timing = [bench, "-m", args.model, "--threads", str(args.threads), "--prefill", ",".join(map(str, PREFILL)),
                 "--context", str(CONTEXT), "--decode-tokens", str(args.decode_tokens), "--repeat", "1",
                 "--no-machine", "--json"]
    kv_rss = [cli, "generate", "-m", args.model, "--device", "cpu", "--threads", str(args.threads), "--prompt-file",
              prompt, "-n", "32", "--temperature", "0"]
    print(f"load average before: {os.getloadavg()}")
    rows = {k: ([], []) for k in [f"prefill_{n}_tok_s" for n in PREFILL] + ["decode_tok_s", "peak_rss_mib"]}
    for r in range(args.rounds):
        k = last_json(spawn_rss(kv_timing)[0])
        l = last_json(spawn_rss(worker + ["--worker", "timing"])[0])
        _, k_rss = spawn_rss(kv_rss)
        l_out, l_rss = spawn_rss(worker + ["--worker", "rss"])
        for key in rows:
            if key == "peak_rss_mib":
                rows[key][0].append(k_rss)
                rows[key][1].append(l_rss)
            else:
                rows[key][0].append(k[key])
                rows[key][1].append(l[key])
        print(f"round {r + 1}: kvevict {k} rss {k_rss:.0f} MiB; llama.cpp {l} rss {l_rss:.0f} MiB "
              f"({last_json(l_out)['prompt_tokens']} prompt tokens)")
    print(f"load average after: {os.getloadavg()}")
    print(f"\nmodel {args.model}, {args.threads} threads, medians of {args.rounds} alternating rounds\n")
    print("| measure | kvevict | llama.cpp | kvevict / llama.cpp |")
    print("|---|---|---|---|")
    names = {"prefill_512_tok_s": "prefill 512 tokens (tok/s)", "prefill_2048_tok_s": "prefill 2048 tokens (tok/s)",
             "decode_tok_s": f"decode at a {CONTEXT}-token context (tok/s)",
             "peak_rss_mib": "peak RSS, prompt file + 32 tokens (MiB)"}
    for key, (kv, ll) in rows.items():
        a, b = statistics.median(kv), statistics.median(ll)
        print(f"| {names[key]} | {a:.1f} | {b:.1f} | {a / b:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
