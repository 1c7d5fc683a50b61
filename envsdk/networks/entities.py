"""The default reader of sets of entities (:class:`~envsdk.envs.spaces.EntitySet`): entity attention.

ML-Agents reads its variable-length observations (BufferSensor) with an entity embedding and a
residual self-attention block (``mlagents/trainers/torch_entities/attention.py``:
``EntityEmbedding``, ``ResidualSelfAttention``); :class:`EntityAttention` is the same design, in
the encoder of :mod:`envsdk.networks.encoder`:

* each entity is embedded together with the agent's own features (the encodings of the
  observation's other parts, through one linear layer: ML-Agents' ``x_self``), so that an entity is
  read relative to the agent;
* the entities of every set attend to each other (multi-head attention, layer norms before and
  after, a residual connection), padded rows (all zeros) masked out as keys;
* the result is the mean over the real entities, which the encoder concatenates with the other
  parts' encodings before its MLP.

The output does not depend on the order of the entities, nor on how many padding rows there
are: every step treats entities alike, and padding is neither attended to nor averaged.  A set
with no entity at all reads as zeros.
"""

from __future__ import annotations

import torch
from torch import nn

EMBEDDING = 128  # ML-Agents' ObservationEncoder.ATTENTION_EMBEDDING_SIZE
HEADS = 4  # ML-Agents' ResidualSelfAttention default
_NEG = -1e6  # a masked key's score (ML-Agents' MultiHeadAttention.NEG_INF): exp() of it is 0
_EPSILON = 1e-7


def _scaled_linear(inputs: int, outputs: int) -> nn.Linear:
    """A linear layer initialised as ML-Agents' attention layers are (T-Fixup: normal weights with
    gain sqrt(0.125 / outputs), zero bias), which keeps the residual block near identity at first."""
    layer = nn.Linear(inputs, outputs)
    nn.init.normal_(layer.weight, std=(0.125 / outputs) ** 0.5)
    nn.init.zeros_(layer.bias)
    return layer


def padding(entities: torch.Tensor) -> torch.Tensor:
    """(batch, entities) 1.0 where a row is all zeros (padding), else 0.0."""
    return (entities == 0).all(dim=-1).float()


class EntityAttention(nn.Module):
    """Sets of entities (and the agent's own features) -> one vector of :data:`EMBEDDING` floats."""

    def __init__(
        self, self_width: int, entity_sizes: list[int], embedding: int = EMBEDDING, heads: int = HEADS
    ):
        super().__init__()
        self.width = embedding
        self.heads = heads
        self.self_encoder = (
            nn.Sequential(_scaled_linear(self_width, embedding), nn.SiLU()) if self_width else None
        )
        joined = embedding if self_width else 0
        self.embeddings = nn.ModuleList(
            nn.Sequential(_scaled_linear(joined + size, embedding), nn.SiLU()) for size in entity_sizes
        )
        self.query, self.key, self.value, self.out = (_scaled_linear(embedding, embedding) for _ in range(4))
        self.embedding_norm = nn.LayerNorm(embedding, elementwise_affine=False)
        self.residual_norm = nn.LayerNorm(embedding, elementwise_affine=False)

    def forward(
        self, own: torch.Tensor | None, sets: list[torch.Tensor], absent: list[torch.Tensor] | None = None
    ) -> torch.Tensor:
        """``own``: (batch, self_width) or None; ``sets``: one (batch, max_entities, size) per set;
        ``absent``: one (batch, max_entities) per set, 1.0 where a row is padding (by default: rows
        of zeros, as a BufferSensor pads)."""
        masks, embedded = [], []
        me = self.self_encoder(own) if self.self_encoder is not None and own is not None else None
        for i, (entities, embed) in enumerate(zip(sets, self.embeddings, strict=True)):
            entities = entities.float()
            masks.append(padding(entities) if absent is None else absent[i].float())
            if me is not None:
                entities = torch.cat([me.unsqueeze(1).expand(-1, entities.shape[1], -1), entities], dim=-1)
            embedded.append(embed(entities))
        mask = torch.cat(masks, dim=1)  # (batch, n)
        x = self.embedding_norm(torch.cat(embedded, dim=1))  # (batch, n, embedding)
        attended = self._attention(self.query(x), self.key(x), self.value(x), mask)
        x = self.residual_norm(self.out(attended) + x)
        real = (1.0 - mask).unsqueeze(-1)
        pooled: torch.Tensor = (x * real).sum(dim=1) / (real.sum(dim=1) + _EPSILON)
        return pooled

    def _attention(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor
    ) -> torch.Tensor:
        batch, n, width = q.shape
        head = width // self.heads

        def split(t: torch.Tensor) -> torch.Tensor:
            return t.reshape(batch, n, self.heads, head).transpose(1, 2)  # (batch, heads, n, head)

        scores = split(q) @ split(k).transpose(2, 3) / width**0.5  # (batch, heads, n, n)
        keys = mask.reshape(batch, 1, 1, n)
        scores = scores * (1.0 - keys) + keys * _NEG
        out = torch.softmax(scores, dim=-1) @ split(v)
        return out.transpose(1, 2).reshape(batch, n, width)
