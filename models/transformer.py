"""Two transformer jobs in plain torch: a GPT-2-small-style decoder and a BERT-base-style encoder.

Both follow the published configurations exactly, so their parameter counts equal the published ones:

* ``gpt2_small`` — 12 pre-LayerNorm decoder blocks (causal self-attention), width 768, 12 heads, MLP 3072,
  GELU, learned positions for 1,024 tokens, vocabulary 50,257, final LayerNorm and a language-model head
  tied to the token embedding: 124,439,808 parameters (GPT-2 small). Trained as a language model: logits
  ``(B, T, vocabulary)`` against next-token labels.
* ``bert_base`` — 12 post-LayerNorm encoder blocks, width 768, 12 heads, MLP 3072, GELU, token, position
  (512) and segment (2) embeddings with LayerNorm, and the tanh pooler: 109,482,240 parameters (BERT-base
  without task head), plus a ``Linear(768, num_classes)`` sequence-classification head on the pooled token.

Inputs are synthetic token ids (:func:`models.data.synthetic_tokens`); the sequence length is the
campaign's ``seq_len`` and must not exceed the position table (1,024 / 512).
"""

from __future__ import annotations

import torch
from torch import nn

GPT2_VOCAB, GPT2_POSITIONS = 50_257, 1024
BERT_VOCAB, BERT_POSITIONS, BERT_SEGMENTS = 30_522, 512, 2
WIDTH, HEADS, LAYERS, MLP = 768, 12, 12, 3072


def _blocks(norm_first: bool) -> nn.TransformerEncoder:
    layer = nn.TransformerEncoderLayer(WIDTH, HEADS, dim_feedforward=MLP, dropout=0.1, activation="gelu",
                                       batch_first=True, norm_first=norm_first, layer_norm_eps=1e-5)
    return nn.TransformerEncoder(layer, LAYERS, enable_nested_tensor=False)


class GPT2Small(nn.Module):
    """Decoder-only language model; ``forward(tokens (B, T)) -> logits (B, T, vocabulary)``."""

    max_positions = GPT2_POSITIONS

    def __init__(self) -> None:
        super().__init__()
        self.token_embedding = nn.Embedding(GPT2_VOCAB, WIDTH)
        self.position_embedding = nn.Embedding(GPT2_POSITIONS, WIDTH)
        self.dropout = nn.Dropout(0.1)
        self.blocks = _blocks(norm_first=True)
        self.final_norm = nn.LayerNorm(WIDTH)
        nn.init.normal_(self.token_embedding.weight, std=0.02)
        nn.init.normal_(self.position_embedding.weight, std=0.01)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        length = tokens.shape[1]
        positions = torch.arange(length, device=tokens.device)
        hidden = self.dropout(self.token_embedding(tokens) + self.position_embedding(positions))
        mask = nn.Transformer.generate_square_subsequent_mask(length, device=tokens.device, dtype=hidden.dtype)
        hidden = self.final_norm(self.blocks(hidden, mask=mask, is_causal=True))
        return hidden @ self.token_embedding.weight.t()  # language-model head tied to the embedding


class BertBase(nn.Module):
    """Encoder with pooler and a classification head; ``forward(tokens (B, T)) -> logits (B, classes)``."""

    max_positions = BERT_POSITIONS

    def __init__(self, num_classes: int) -> None:
        super().__init__()
        self.token_embedding = nn.Embedding(BERT_VOCAB, WIDTH)
        self.position_embedding = nn.Embedding(BERT_POSITIONS, WIDTH)
        self.segment_embedding = nn.Embedding(BERT_SEGMENTS, WIDTH)
        self.embedding_norm = nn.LayerNorm(WIDTH, eps=1e-12)
        self.dropout = nn.Dropout(0.1)
        self.blocks = _blocks(norm_first=False)
        self.pooler = nn.Linear(WIDTH, WIDTH)
        self.head = nn.Linear(WIDTH, num_classes)

    def backbone_parameters(self) -> int:
        """Parameters of BERT-base proper (everything but the task head)."""
        return sum(p.numel() for name, p in self.named_parameters() if not name.startswith("head."))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        length = tokens.shape[1]
        positions = torch.arange(length, device=tokens.device)
        segments = torch.zeros_like(tokens)
        hidden = self.token_embedding(tokens) + self.position_embedding(positions) + self.segment_embedding(segments)
        hidden = self.blocks(self.dropout(self.embedding_norm(hidden)))
        pooled = torch.tanh(self.pooler(hidden[:, 0]))
        return self.head(self.dropout(pooled))


def gpt2_small(*, num_classes: int, image_size: int) -> nn.Module:
    del num_classes, image_size  # a language model: its "classes" are the vocabulary
    return GPT2Small()


def bert_base(*, num_classes: int, image_size: int) -> nn.Module:
    del image_size
    return BertBase(num_classes)
