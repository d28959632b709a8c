"""A Llama-3-shaped decoder in plain PyTorch, built on the meta device for big-graph tests."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator, Optional

import torch
import torch.nn.functional as F
from torch import nn

from models import Case

__all__ = ["LlamaShaped", "llama_meta", "LLAMA_3_70B", "HF_LLAMA_3_70B", "hf_llama_meta",
           "gpt2_tiny"]

#: Llama-3-70B's shape: 80 decoder blocks, hidden 8192, 64 heads, 8 KV heads, MLP 28672.
LLAMA_3_70B = dict(layers=80, hidden=8192, heads=64, kv_heads=8, mlp=28672, vocab=128256)


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


class Attention(nn.Module):
    """Grouped-query attention: ``kv_heads`` key/value heads shared by ``heads`` queries."""

    def __init__(self, hidden: int, heads: int, kv_heads: int) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, hidden // heads
        self.q_proj = nn.Linear(hidden, hidden, bias=False)
        self.k_proj = nn.Linear(hidden, kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(hidden, kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(hidden, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, _ = x.shape
        q = self.q_proj(x).view(batch, length, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(batch, length, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(batch, length, self.kv_heads, self.head_dim).transpose(1, 2)
        share = self.heads // self.kv_heads
        k, v = k.repeat_interleave(share, dim=1), v.repeat_interleave(share, dim=1)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(out.transpose(1, 2).reshape(batch, length, -1))


class MLP(nn.Module):
    def __init__(self, hidden: int, inner: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(hidden, inner, bias=False)
        self.up_proj = nn.Linear(hidden, inner, bias=False)
        self.down_proj = nn.Linear(inner, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderBlock(nn.Module):
    def __init__(self, hidden: int, heads: int, kv_heads: int, mlp: int) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(hidden)
        self.self_attn = Attention(hidden, heads, kv_heads)
        self.post_attention_layernorm = RMSNorm(hidden)
        self.mlp = MLP(hidden, mlp)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x))
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaShaped(nn.Module):
    """Embedding, ``layers`` decoder blocks, a final norm and the LM head (no rotary
    embedding, no cache: the module tree and op count of Llama 3, not its numerics)."""

    def __init__(self, layers: int, hidden: int, heads: int, kv_heads: int, mlp: int,
                 vocab: int) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab, hidden)
        self.layers = nn.ModuleList(DecoderBlock(hidden, heads, kv_heads, mlp)
                                    for _ in range(layers))
        self.norm = RMSNorm(hidden)
        self.lm_head = nn.Linear(hidden, vocab, bias=False)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        x = self.embed_tokens(input_ids)
        for layer in self.layers:
            x = layer(x)
        return self.lm_head(self.norm(x))


def llama_meta(layers: Optional[int] = None, length: int = 16) -> Case:
    """Llama-3-70B's shape (``layers`` blocks, default 80) on the meta device, with meta
    input ids of ``length`` tokens: no memory is allocated, so it builds in about 1 s."""
    shape = {**LLAMA_3_70B, **({"layers": layers} if layers is not None else {})}
    with torch.device("meta"):
        model = LlamaShaped(**shape).eval()
    ids = torch.zeros(1, length, dtype=torch.long, device="meta")
    return Case(model, (ids,), {})


#: Hugging Face's config of Llama-3-70B (issue 22), its real rotary embedding included.
HF_LLAMA_3_70B = dict(hidden_size=8192, intermediate_size=28672, num_hidden_layers=80,
                      num_attention_heads=64, num_key_value_heads=8, vocab_size=128256,
                      max_position_embeddings=8192, use_cache=False)


def hf_llama_meta(length: int = 16) -> Any:
    """Hugging Face's ``LlamaForCausalLM`` shaped as Llama-3-70B on the meta device, with
    meta ids of ``length`` tokens: a context manager giving the ``Case`` to record under
    ``no_grad``. With ``use_cache=False`` transformers looks for packed sequences with
    ``.item()``, which a meta tensor cannot answer: that look-up returns None inside."""
    import transformers
    from transformers import masking_utils

    @contextmanager
    def case() -> Iterator[Case]:
        with torch.device("meta"):
            model = transformers.LlamaForCausalLM(
                transformers.LlamaConfig(**HF_LLAMA_3_70B)).eval()
        ids = torch.zeros(1, length, dtype=torch.long, device="meta")
        original = masking_utils.find_packed_sequence_indices
        masking_utils.find_packed_sequence_indices = lambda *args, **kwargs: None
        try:
            yield Case(model, (ids,), {})
        finally:
            masking_utils.find_packed_sequence_indices = original

    return case()


def gpt2_tiny() -> Case:
    """Hugging Face GPT-2 from a small config (3 blocks, 64 wide), as issue 22 walks it."""
    import transformers

    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=3, n_embd=64, n_head=2, vocab_size=100,
                                     n_positions=32, bos_token_id=0, eos_token_id=0)
    model = transformers.GPT2Model(config).eval()
    return Case(model, (torch.randint(0, 100, (1, 8)),), {})
