"""Shape `kv_cat`: autoregressive generation whose KV cache grows by torch.cat at every new token.

Knob: `--new-tokens`, how many tokens are generated after a fixed prompt. Each token runs the model once and
concatenates its keys and values onto the cache, so the NUMBER of allocations grows with the knob (and the
cache's last sizes with it): no recording holds the bigger run's extra steps. Fixed seed.

    python tests/predict_shapes/kv_cat.py --new-tokens 32 --prompt 64 --batch 8
"""
from __future__ import annotations

import argparse

import torch
from torch import nn


class Decoder(nn.Module):
    """One attention layer and an MLP per block; `cache` is a [keys, values] pair per block, grown in place."""

    def __init__(self, vocab: int, d: int, layers: int) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.qkv = nn.ModuleList(nn.Linear(d, 3 * d) for _ in range(layers))
        self.mlp = nn.ModuleList(nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))
                                 for _ in range(layers))
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx: torch.Tensor, caches: list[list[torch.Tensor]]) -> torch.Tensor:
        x = self.tok(idx)
        for qkv, mlp, cache in zip(self.qkv, self.mlp, caches):
            q, k, v = qkv(x).chunk(3, dim=-1)
            if cache:
                k, v = torch.cat([cache[0], k], dim=1), torch.cat([cache[1], v], dim=1)
            cache[:] = [k, v]
            x = x + (q @ k.transpose(1, 2) / k.shape[-1] ** 0.5).softmax(-1) @ v
            x = x + mlp(x)
        return self.head(x[:, -1])


@torch.no_grad()
def generate(model: Decoder, prompt: torch.Tensor, new_tokens: int, layers: int) -> torch.Tensor:
    caches: list[list[torch.Tensor]] = [[] for _ in range(layers)]
    out = prompt
    nxt = prompt
    for _ in range(new_tokens):
        nxt = model(nxt, caches).argmax(-1, keepdim=True)
        out = torch.cat([out, nxt], dim=1)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--new-tokens", type=int, required=True)
    ap.add_argument("--prompt", type=int, default=64)
    ap.add_argument("--batch", type=int, default=8)
    args = ap.parse_args()
    torch.manual_seed(0)
    model = Decoder(vocab=1024, d=512, layers=2).eval()
    generate(model, torch.randint(0, 1024, (args.batch, args.prompt)), args.new_tokens, 2)


if __name__ == "__main__":
    main()
