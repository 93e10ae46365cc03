"""A Hugging Face-style causal language model (built from a config, nothing downloaded) trained the way such
projects train on a GPU: the model and batches moved to "cuda", position ids and masks made on the inputs' device,
mixed precision with torch.autocast("cuda") and a GradScaler, and the job's own memory figures printed at the end."""
import json
import math
import sys
from dataclasses import dataclass

import torch
from torch import nn


@dataclass
class TinyConfig:
    vocab_size: int = 512
    hidden_size: int = 128
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    intermediate_size: int = 512
    max_position_embeddings: int = 128


class Attention(nn.Module):
    def __init__(self, config: TinyConfig) -> None:
        super().__init__()
        self.heads = config.num_attention_heads
        self.qkv = nn.Linear(config.hidden_size, 3 * config.hidden_size)
        self.out = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, x, mask):
        b, t, c = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-1, -2) / math.sqrt(c // self.heads)
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
        return self.out((scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, c))


class Block(nn.Module):
    def __init__(self, config: TinyConfig) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(config.hidden_size), nn.LayerNorm(config.hidden_size)
        self.attn = Attention(config)
        self.mlp = nn.Sequential(nn.Linear(config.hidden_size, config.intermediate_size), nn.GELU(),
                                 nn.Linear(config.intermediate_size, config.hidden_size))

    def forward(self, x, mask):
        x = x + self.attn(self.ln1(x), mask)
        return x + self.mlp(self.ln2(x))


class TinyForCausalLM(nn.Module):
    def __init__(self, config: TinyConfig) -> None:
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(config.vocab_size, config.hidden_size)
        self.pos = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.layers = nn.ModuleList(Block(config) for _ in range(config.num_hidden_layers))
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.register_buffer("causal", torch.ones(config.max_position_embeddings, config.max_position_embeddings,
                                                  dtype=torch.bool).tril(), persistent=False)

    def forward(self, input_ids, labels=None):
        t = input_ids.shape[1]
        position_ids = torch.arange(t, device=input_ids.device).unsqueeze(0)
        x = self.embed(input_ids) + self.pos(position_ids)
        mask = self.causal[:t, :t]
        for layer in self.layers:
            x = layer(x, mask)
        logits = self.lm_head(x)
        if labels is None:
            return logits
        return nn.functional.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), labels.reshape(-1))


def main(steps: int = 3) -> dict:
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(0)
    corpus = torch.randint(0, 512, (256, 65))  # the dataset stays on the host
    model = TinyForCausalLM(TinyConfig()).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler("cuda")
    for step in range(steps):
        batch = corpus[step * 8:(step + 1) * 8].to(device, non_blocking=True)
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(batch[:, :-1], labels=batch[:, 1:])
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    return {"device": str(next(model.parameters()).device), "loss_dtype": str(loss.dtype),
            "max_memory_allocated": torch.cuda.max_memory_allocated(),
            "max_memory_reserved": torch.cuda.max_memory_reserved(),
            "memory_allocated": torch.cuda.memory_allocated(), "memory_reserved": torch.cuda.memory_reserved(),
            "host_bytes": corpus.numel() * corpus.element_size()}


if __name__ == "__main__":
    print(json.dumps(main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)))
