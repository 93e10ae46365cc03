"""Token-by-token decoding with a KV cache on the CPU: grown by torch.cat (each step makes a new cache tensor and
frees the old one), or, with `--page-tokens N`, held in fixed pages of N tokens as vLLM does: the program a
`--paged-kv` what-if stands for, recorded as really changed. Recorded by tests/support/whatif_programs.py."""
import argparse

import torch


def decode_cat(requests: int, prompt: int, new: int, width: int) -> None:
    for r in range(requests):
        cache = torch.randn(prompt + 8 * r, width)  # the prompt's keys
        for _ in range(new):
            k = torch.randn(1, width)
            cache = torch.cat([cache, k])  # the KV cache grows: a new tensor, the old one freed
        del cache


def decode_paged(requests: int, prompt: int, new: int, width: int, page: int) -> None:
    for r in range(requests):
        pages, used = [], 0
        for _ in range(prompt + 8 * r + new):
            if used % page == 0:
                pages.append(torch.empty(page, width))  # a new page of the KV cache
            pages[-1][used % page] = torch.randn(width)
            used += 1
        del pages


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--requests", type=int, default=4)
    p.add_argument("--prompt", type=int, default=64)
    p.add_argument("--new", type=int, default=64)
    p.add_argument("--width", type=int, default=4096)
    p.add_argument("--page-tokens", type=int, default=0)
    a = p.parse_args()
    if a.page_tokens:
        decode_paged(a.requests, a.prompt, a.new, a.width, a.page_tokens)
    else:
        decode_cat(a.requests, a.prompt, a.new, a.width)


if __name__ == "__main__":
    main()
