"""A small GPT-style model for the bundled samples: `train` (forward, backward, AdamW) and `infer`
(autoregressive decoding with a KV cache). Sequence lengths vary from step to step, as with real batches
of text, which is what leaves the caching allocator's free memory in pieces.

    python sample_snapshots/workloads/gpt.py train --steps 4 --seq 64:512
    python sample_snapshots/workloads/gpt.py infer --requests 6 --prompt 16:128 --new-tokens 48
"""
from __future__ import annotations

import argparse
import math
import random

import torch
import torch.nn.functional as F
from torch import nn


class Block(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def attention(self, x: torch.Tensor, cache: list | None) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        if cache is not None:
            if cache:
                k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
            cache[:] = [k, v]
        scores = q @ k.transpose(-2, -1) / math.sqrt(k.shape[-1])
        if cache is None or t > 1:
            mask = torch.ones(t, k.shape[2], dtype=torch.bool).triu(k.shape[2] - t + 1)
            scores = scores.masked_fill(mask, float("-inf"))
        out = scores.softmax(-1) @ v
        return self.proj(out.transpose(1, 2).reshape(b, t, d))

    def forward(self, x: torch.Tensor, cache: list | None = None) -> torch.Tensor:
        x = x + self.attention(x, cache)
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab: int, d: int, layers: int, heads: int, max_len: int) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(max_len, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx: torch.Tensor, caches: list | None = None, start: int = 0) -> torch.Tensor:
        x = self.tok(idx) + self.pos(torch.arange(start, start + idx.shape[1]))
        for i, block in enumerate(self.blocks):
            x = block(x, None if caches is None else caches[i])
        return self.head(self.ln(x))


def span(text: str) -> tuple[int, int]:
    lo, _, hi = text.partition(":")
    return int(lo), int(hi or lo)


def train(args: argparse.Namespace, rng: random.Random) -> tuple:
    model = GPT(args.vocab, args.d_model, args.layers, args.heads, span(args.seq)[1])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(args.steps):
        t = rng.randint(*span(args.seq))
        batch = args.batch + step * args.grow
        idx = torch.randint(0, args.vocab, (batch, t + 1))
        logits = model(idx[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, args.vocab), idx[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        print(f"step {step}: batch {batch}, seq {t}, loss {loss.item():.3f}")
    return model, opt


@torch.no_grad()
def infer(args: argparse.Namespace, rng: random.Random) -> tuple:
    prompt_lo, prompt_hi = span(args.prompt)
    model = GPT(args.vocab, args.d_model, args.layers, args.heads, prompt_hi + args.new_tokens)
    for r in range(args.requests):
        idx = torch.randint(0, args.vocab, (args.batch, rng.randint(prompt_lo, prompt_hi)))
        caches: list = [[] for _ in model.blocks]
        logits = model(idx, caches)
        for _ in range(args.new_tokens):
            nxt = logits[:, -1:].argmax(-1)
            logits = model(nxt, caches, start=caches[0][0].shape[2])
        print(f"request {r}: prompt {idx.shape[1]}, generated {args.new_tokens}")
    return model, caches


def main() -> tuple:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=("train", "infer"))
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--grow", type=int, default=0, help="train: add this many sequences to the batch each step")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--seq", default="64:512", help="train: sequence length range LO:HI")
    ap.add_argument("--requests", type=int, default=6)
    ap.add_argument("--prompt", default="16:128", help="infer: prompt length range LO:HI")
    ap.add_argument("--new-tokens", type=int, default=48)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    return (train if args.mode == "train" else infer)(args, rng)


if __name__ == "__main__":
    STATE = main()  # kept at module level: what is live at the end stays live until a snapshot is taken
