#!/usr/bin/env python3
"""How fast speculative decoding of one reply could be, and what limits it.

  scripts/spec_bound.py -m TARGET.gguf -d DRAFT.gguf [-p TEXT] [-n N] [--k-max K]
                        [--exe BUILD/subternary] [--check] [--engine-agreement]

1. The target decodes the prompt greedily alone (`subternary generate`): the
   reply, and the seconds of a one-row step.
2. The same with the draft at a fixed K (--k-max, default 8), governor off:
   the seconds of a draft forward and of the rest of a round (the verify of
   K+1 rows, messages, commit), and the measured speed-up.
3. The draft reads prompt + reply in one batch (`subternary logits`, the
   reference forward pass): where its greedy choice is the target's token.
   That agreement string decides every round: a round from position i with
   K drafts accepts the agreeing run from i, up to K.
4. Replays the string with the measured costs (a round's rest interpolated
   linearly in its rows between the one-row step and the K-max round) for
   each fixed K, and for an oracle that drafts exactly the agreeing run: no
   policy that chooses K without knowing the target's answer beats it.
   Also replays --draft-p-min stops, and prints, for the disagreements,
   the draft's confidence and the rank of the target's token among the
   draft's choices (rank 1: its second guess).

Timing steps 1-2 are one run each on a shared machine: read the speed-ups
as ratios from one run, and the replay as a model checked against step 2.
The rounds at K-max are not timing: the replay must count as many as the
engine ran, unless the reference forward and the kernels choose
differently (the pico TQ2_0 draft does at 1 of 48 positions, the l1b Q4_0
draft at 9 of 128: the kernels quantise activations to 8 bits);
--engine-agreement takes the string from the engine itself, one process
per position.  --check exits 1 when the rounds differ
(tests/test_spec_bound.c, with --engine-agreement).
"""
import argparse
import array
import json
import math
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, "build", "subternary")  # --exe replaces it
DEFAULT_PROMPT = "Once upon a time, in a small village by the sea, there lived"


def run(args):
    p = subprocess.run([BIN] + args, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit("subternary %s failed:\n%s" % (args[0], p.stderr[-2000:]))
    return p


def generate(target, prompt_ids, n, extra):
    p = run(["generate", "-m", target, "--tokens", ",".join(map(str, prompt_ids)), "-n", str(n),
             "--ids", "--json", "--quiet"] + extra)
    ids = [int(x) for x in p.stdout.strip().splitlines()[-1].split(",")]
    return ids, json.loads(p.stderr.strip().splitlines()[-1])


def agreement(draft, prompt_ids, reply):
    """Per reply token: (draft's argmax == token, draft's top probability, rank of token)."""
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "logits.f32")
        seq = prompt_ids + reply[:-1]
        run(["logits", "-m", draft, "--tokens", ",".join(map(str, seq)), "-o", out])
        a = array.array("f")
        with open(out, "rb") as f:
            a.frombytes(f.read())
    V = len(a) // len(seq)
    rows = []
    for i, tok in enumerate(reply):
        j = len(prompt_ids) + i - 1
        row = a[j * V:(j + 1) * V]
        mx = max(row)
        top = 1.0 / sum(math.exp(x - mx) for x in row)
        rank = sum(1 for x in row if x > row[tok])
        rows.append((rank == 0, top, rank))
    return rows


def engine_agreement(draft, prompt_ids, reply):
    """The draft's greedy choice after each prefix, through the engine's own
    kernels: one `generate -n 1` per position (slow for large drafts)."""
    out = []
    for i, tok in enumerate(reply):
        ids, _ = generate(draft, prompt_ids + reply[:i], 1, [])
        out.append(ids[0] == tok)
    return out


def replay(agree, policy, draft_s, rest_s):
    """Tokens per second of the reply when each round drafts policy(run) tokens."""
    i, seconds, rounds = 0, 0.0, 0
    while i < len(agree):
        r = 0
        while i + r < len(agree) and agree[i + r]:
            r += 1
        K = policy(r)
        m = min(r, K)
        seconds += K * draft_s + rest_s(K + 1)
        i += m + 1
        rounds += 1
    return len(agree) / seconds, rounds


def replay_p_min(rows, K, p_min, draft_s, rest_s):
    """Tokens per second with K drafts at most, a round stopping before a
    draft whose top probability is below p_min (after at least one), as
    --draft-p-min does: the forward that found it doubtful is still paid."""
    i, seconds = 0, 0.0
    while i < len(rows):
        kept = forwards = 0
        for d in range(K):
            if i + d >= len(rows):
                break
            forwards += 1
            if d > 0 and rows[i + d][1] < p_min:
                break
            kept += 1
        m = 0
        while m < kept and rows[i + m][0]:
            m += 1
        seconds += forwards * draft_s + rest_s(kept + 1)
        i += m + 1
    return len(rows) / seconds


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-m", required=True)
    ap.add_argument("-d", required=True)
    ap.add_argument("-p", default=DEFAULT_PROMPT)
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("--k-max", type=int, default=8)
    ap.add_argument("--exe", help="the subternary binary (default: build/subternary)")
    ap.add_argument("--check", action="store_true", help="exit 1 if the replayed rounds at K-max differ")
    ap.add_argument("--engine-agreement", action="store_true",
                    help="the agreement string from the engine's kernels, one process per position, "
                         "instead of the reference forward pass")
    o = ap.parse_args()
    global BIN
    if o.exe:
        BIN = os.path.abspath(o.exe)
    if not os.access(BIN, os.X_OK):
        sys.exit("no %s: run 'make' first" % BIN)
    p = subprocess.run([BIN, "tokenize", "-m", o.m], input=o.p, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit("subternary tokenize failed:\n" + p.stderr[-2000:])
    prompt = [int(x) for x in p.stdout.split()]

    reply, ar = generate(o.m, prompt, o.n, [])
    one_row = ar["seconds"] / ar["tokens"]
    K = o.k_max
    spec_reply, sp = generate(o.m, prompt, o.n, ["-d", o.d, "--k", str(K), "--no-governor"])
    if spec_reply != reply:
        sys.exit("speculative reply differs from the target's own: greedy decoding is broken")
    draft_s = sp["draft_seconds"] / sp["drafted"]
    rest_k = (sp["round_seconds"] - sp["draft_seconds"]) / sp["rounds"]

    def rest_s(rows):  # linear from one row (the AR step) to K+1 rows
        return one_row + (rest_k - one_row) * (rows - 1) / K

    rows = agreement(o.d, prompt, reply)
    agree = [r[0] for r in rows]
    if o.engine_agreement:
        exact = engine_agreement(o.d, prompt, reply)
        n_diff = sum(1 for a, b in zip(agree, exact) if a != b)
        print("the engine's kernels and the reference forward break %d near-ties differently" % n_diff)
        agree = exact
        rows = [(a, r[1], r[2]) for a, r in zip(agree, rows)]
    print("target %s, draft %s, %d tokens" % (os.path.basename(o.m), os.path.basename(o.d), len(reply)))
    print("measured: one-row step %.1f ms, draft forward %.1f ms (%.3f of it), round rest at K %d: %.1f ms "
          "(%.2fx a one-row step)" % (one_row * 1e3, draft_s * 1e3, draft_s / one_row, K, rest_k * 1e3,
                                      rest_k / one_row))
    print("measured speed-up at K %d: %.2fx (%.2f against %.2f tokens/s)"
          % (K, sp["tokens_per_second"] / ar["tokens_per_second"], sp["tokens_per_second"],
             ar["tokens_per_second"]))
    print("agreement %.3f (draft's greedy choice = target's token, teacher-forced):" % (sum(agree) / len(agree)))
    print("  " + "".join("1" if a else "0" for a in agree))
    for k in range(1, K + 1):
        tps, n_rounds = replay(agree, lambda r, k=k: k, draft_s, rest_s)
        print("replay K %d: %.2fx (%d rounds)" % (k, tps * one_row, n_rounds))
    replayed = n_rounds
    tps, n_rounds = replay(agree, lambda r: min(r, K), draft_s, rest_s)
    print("replay oracle (drafts exactly the agreeing run, up to %d): %.2fx (%d rounds)"
          % (K, tps * one_row, n_rounds))
    for p_min in (0.2, 0.5, 0.8):
        print("replay --draft-p-min %.1f, K %d: %.2fx" % (p_min, K, replay_p_min(rows, K, p_min, draft_s, rest_s)
                                                          * one_row))
    bad = [r for r in rows if not r[0]]
    good = sorted(r[1] for r in rows if r[0])
    print("disagreements %d: the draft's top probability %s; the target's token at rank %s"
          % (len(bad), " ".join("%.2f" % r[1] for r in bad), " ".join(str(r[2]) for r in bad)))
    if good:
        print("agreements: top probability below 0.5 at %d of %d" % (sum(1 for x in good if x < 0.5), len(good)))
    print("rounds at K %d: the engine ran %d, the replay counts %d" % (K, sp["rounds"], replayed))
    if o.check and sp["rounds"] != replayed:
        sys.exit("the replay does not follow the engine's rounds")


if __name__ == "__main__":
    main()
