"""Gradient compressors: each turns one tensor into a uint8 message of a size fixed in advance.

- `TopK` (Lin et al., "Deep Gradient Compression", ICLR 2018): k = ⌈ratio·n⌉ largest: 8k bytes.
- `RandomK` (Stich et al., "Sparsified SGD with Memory", NeurIPS 2018): k shared random
  coordinates: 4k bytes.
- `QSGD` (Alistarh et al., NeurIPS 2017): stochastic rounding to s = 2^(bits-1) - 1 levels of
  ‖v‖₂, unbiased: ⌈n·bits/8⌉ + 4 bytes.
- `Sign` (signSGD, Bernstein et al., ICML 2018, scaled as in EF-signSGD, Karimireddy et al.,
  ICML 2019): (‖v‖₁/n)·sign(v): ⌈n/8⌉ + 4 bytes.

The size depends only on n, so one all-gather carries every rank's message. The formulas and the
seeds: docs/compression.md, `parlab.compression.compressors`.
"""

from __future__ import annotations

import math

import torch

from parlab.compression.packing import as_bytes, from_bytes, pack_bits, packed_bytes, unpack_bits

INDEX_BYTES = VALUE_BYTES = 4  # int32 index, float32 value


def seed_of(*parts: int) -> int:
    """One integer seed from several (run seed, step, tensor index, rank ...), reproducibly."""
    seed = 0
    for part in parts:
        seed = (seed * 1_000_003 + part + 1) % 2 ** 62
    return seed


def generator(*parts: int) -> torch.Generator:
    """A torch generator seeded by `seed_of(*parts)`."""
    return torch.Generator().manual_seed(seed_of(*parts))


def topk_count(numel: int, ratio: float) -> int:
    """k = ⌈ratio·n⌉ elements kept, at least one."""
    return max(1, min(numel, math.ceil(ratio * numel)))


class TopK:
    """Largest-magnitude k = ⌈ratio·n⌉ entries; message: k int32 indices then k float32 values."""

    def __init__(self, ratio: float):
        self.ratio = ratio

    def payload_bytes(self, numel: int) -> int:
        return topk_count(numel, self.ratio) * (INDEX_BYTES + VALUE_BYTES)

    def encode(self, tensor: torch.Tensor, seed: int = 0, rank: int = 0) -> torch.Tensor:
        flat = tensor.reshape(-1)  # (n,)
        k = topk_count(flat.numel(), self.ratio)
        indices = flat.abs().topk(k, sorted=False).indices  # (k,) int64
        return torch.cat([as_bytes(indices.to(torch.int32)), as_bytes(flat[indices])])  # (8k,) uint8

    def decode(self, payload: torch.Tensor, numel: int, seed: int = 0) -> torch.Tensor:
        k = topk_count(numel, self.ratio)
        indices = from_bytes(payload[:4 * k], torch.int32).long()  # (k,) positions
        values = from_bytes(payload[4 * k:], torch.float32)  # (k,) values
        return torch.zeros(numel).index_put_((indices,), values)  # (n,) dense, zeros elsewhere


class RandomK(TopK):
    """k = ⌈ratio·n⌉ entries at positions drawn from a generator every rank holds in the same
    state (seeded identically), so only the values travel. Unscaled (biased): with error feedback
    the dropped entries are carried, not lost."""

    def payload_bytes(self, numel: int) -> int:
        return topk_count(numel, self.ratio) * VALUE_BYTES

    def positions(self, numel: int, seed: int) -> torch.Tensor:
        k = topk_count(numel, self.ratio)
        return torch.randperm(numel, generator=generator(seed))[:k]  # (k,) int64, every rank's

    def encode(self, tensor: torch.Tensor, seed: int = 0, rank: int = 0) -> torch.Tensor:
        positions = self.positions(tensor.numel(), seed)
        return as_bytes(tensor.reshape(-1)[positions])  # (4k,) uint8 values

    def decode(self, payload: torch.Tensor, numel: int, seed: int = 0) -> torch.Tensor:
        values = from_bytes(payload, torch.float32)  # (k,)
        return torch.zeros(numel).index_put_((self.positions(numel, seed),), values)  # (n,)


class QSGD:
    """Stochastic quantization to s = 2^(bits-1) - 1 levels of |v|/‖v‖₂, sign bit, packed."""

    def __init__(self, bits: int):
        self.bits, self.levels = bits, 2 ** (bits - 1) - 1

    def payload_bytes(self, numel: int) -> int:
        return VALUE_BYTES + packed_bytes(numel, self.bits)

    def encode(self, tensor: torch.Tensor, seed: int = 0, rank: int = 0) -> torch.Tensor:
        flat = tensor.reshape(-1)  # (n,)
        norm = flat.norm()
        scaled = flat.abs() / norm * self.levels if norm > 0 else torch.zeros_like(flat)
        noise = torch.rand(flat.numel(), generator=generator(seed, rank))  # (n,) u ~ U[0,1)
        level = torch.floor(scaled + noise).clamp_(max=self.levels).long()  # (n,) in [0, s]
        negative = (flat < 0).long()  # (n,) sign bit
        codes = level | (negative << (self.bits - 1))  # (n,) bits-wide codes
        return torch.cat([as_bytes(norm.reshape(1)), pack_bits(codes, self.bits)])  # (4 + ⌈n·b/8⌉,)

    def decode(self, payload: torch.Tensor, numel: int, seed: int = 0) -> torch.Tensor:
        norm = from_bytes(payload[:VALUE_BYTES], torch.float32)  # (1,)
        codes = unpack_bits(payload[VALUE_BYTES:], numel, self.bits)  # (n,) int64
        level = (codes & self.levels).float()
        sign = 1.0 - 2.0 * (codes >> (self.bits - 1)).float()
        return norm * sign * level / self.levels  # (n,)


class Sign:
    """(‖v‖₁/n)·sign(v), sign(0) = +1: one packed bit per element and a float32 scale."""

    def payload_bytes(self, numel: int) -> int:
        return VALUE_BYTES + packed_bytes(numel, 1)

    def encode(self, tensor: torch.Tensor, seed: int = 0, rank: int = 0) -> torch.Tensor:
        flat = tensor.reshape(-1)  # (n,)
        scale = flat.abs().mean().reshape(1)  # (1,) mean |v| = ‖v‖₁/n
        return torch.cat([as_bytes(scale), pack_bits(flat >= 0, 1)])  # (4 + ⌈n/8⌉,) uint8

    def decode(self, payload: torch.Tensor, numel: int, seed: int = 0) -> torch.Tensor:
        scale = from_bytes(payload[:VALUE_BYTES], torch.float32)  # (1,)
        positive = unpack_bits(payload[VALUE_BYTES:], numel, 1).float()  # (n,) 1 = +, 0 = -
        return scale * (2.0 * positive - 1.0)  # (n,)
