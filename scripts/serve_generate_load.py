"""Generations batched across requests, against one at a time: `cargo xtask serve` on a
BART-base-shaped checkpoint (random weights, written here by transformers; every request writes
exactly --new-tokens tokens), loaded by --clients clients that each send --requests /generate
requests back to back (half greedy, half seeded sampling, five prompts of 7-17 words). Runs the
server with --max-batch-generations 1 and with its default, alternated --rounds times, and
prints one JSON line per run: generated tokens per second, p50 and p99 latency, and the
batches /metrics counted. Not part of CI. Needs the venv of scripts/setup-python.sh and
SESAME_MINILM_DIR (its tokenizer).

    cargo build --release -p xtask
    python scripts/serve_generate_load.py [--clients 16] [--requests 4] [--new-tokens 32]
"""
import argparse, json, os, statistics, subprocess, tempfile, threading, time, urllib.request

TEXTS = ["the tower is 324 metres tall, about the same height as an 81-storey building",
         "a cat sat on the mat", "the quick brown fox jumps over the lazy dog near the river bank",
         "rust programs are fast and memory safe", "paris is the capital of france and its largest city"]


def checkpoint(dir):
    import shutil, torch, transformers
    torch.manual_seed(0)
    config = transformers.BartConfig(vocab_size=30522, d_model=768, encoder_layers=6, decoder_layers=6, encoder_attention_heads=12,
                                     decoder_attention_heads=12, encoder_ffn_dim=3072, decoder_ffn_dim=3072, pad_token_id=0,
                                     bos_token_id=101, eos_token_id=102, decoder_start_token_id=102, forced_eos_token_id=None)
    transformers.BartForConditionalGeneration(config).eval().save_pretrained(dir)
    for f in ["vocab.txt", "tokenizer.json", "tokenizer_config.json"]:
        shutil.copy(os.path.join(os.environ["SESAME_MINILM_DIR"], f), dir)


def load(url, clients, requests, new_tokens):
    latencies, tokens = [], []
    def client(c):
        for r in range(requests):
            parameters = {"max_new_tokens": new_tokens, "min_new_tokens": new_tokens, "details": True, "do_sample": c % 2 == 1, "seed": c * 100 + r}
            body = json.dumps({"inputs": TEXTS[(c + r) % len(TEXTS)], "parameters": parameters}).encode()
            start = time.time()
            answer = json.load(urllib.request.urlopen(urllib.request.Request(url + "/generate", body, {"Content-Type": "application/json"}), timeout=900))
            latencies.append(time.time() - start)
            tokens.append(answer["details"]["generated_tokens"])
    start = time.time()
    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    wall = time.time() - start
    latencies.sort()
    return {"requests": len(latencies), "tokens_per_s": round(sum(tokens) / wall, 1), "p50_s": round(statistics.median(latencies), 2), "p99_s": round(latencies[int(0.99 * (len(latencies) - 1))], 2)}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--xtask", default="target/release/xtask")
    p.add_argument("--clients", type=int, default=16)
    p.add_argument("--requests", type=int, default=4)
    p.add_argument("--new-tokens", type=int, default=32)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--port", type=int, default=3911)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as dir:
        checkpoint(dir)
        url = f"http://127.0.0.1:{args.port}"
        for _ in range(args.rounds):
            for flags in [["--max-batch-generations", "1"], []]:
                server = subprocess.Popen([args.xtask, "serve", "--model", dir, "--port", str(args.port), *flags], stderr=subprocess.DEVNULL)
                try:
                    for _ in range(600):
                        try:
                            urllib.request.urlopen(url + "/health", timeout=1)
                            break
                        except OSError:
                            time.sleep(0.1)
                    load(url, 4, 1, 8)  # warm-up
                    result = load(url, args.clients, args.requests, args.new_tokens)
                    metrics = urllib.request.urlopen(url + "/metrics").read().decode().splitlines()
                    result["batches"] = next(l.split()[1] for l in metrics if l.startswith("sesame_batches_total "))
                    print(json.dumps({"flags": " ".join(flags) or "default", **result}), flush=True)
                finally:
                    server.terminate()
                    server.wait()


if __name__ == "__main__":
    main()
