"""Bytes on the wire: bit packing and raw views, so a compressed gradient travels at its true size.

A quantizer that keeps `w` bits per element (QSGD: a sign and a level; signSGD: one sign bit) is
only a compressor if those bits are packed: 8/w elements per byte, as QSGD's encoding does
(Alistarh et al. 2017, §3.2; we pack fixed-width codes rather than Elias-code them). Every
compressor's message is one flat uint8 tensor, so float32 values and int32 indices ride along as
raw bytes (`as_bytes`, `from_bytes`) and a whole model's payload is a single all-gather.
"""

from __future__ import annotations

import math

import torch


def packed_bytes(count: int, width: int) -> int:
    """Bytes holding `count` codes of `width` bits each, packed back to back."""
    return math.ceil(count * width / 8)


def pack_bits(codes: torch.Tensor, width: int) -> torch.Tensor:
    """Codes in [0, 2**width) -> uint8 bytes, little-endian bit order, `packed_bytes(n, width)` long."""
    codes = codes.reshape(-1).to(torch.int64)  # (n,)
    shifts = torch.arange(width, dtype=torch.int64)
    bits = ((codes[:, None] >> shifts) & 1).reshape(-1)  # (n·width,) one bit per entry
    padding = (-bits.numel()) % 8
    bits = torch.cat([bits, bits.new_zeros(padding)]).reshape(-1, 8)  # (⌈n·width/8⌉, 8)
    weights = 1 << torch.arange(8, dtype=torch.int64)
    return (bits * weights).sum(1).to(torch.uint8)  # (⌈n·width/8⌉,) uint8


def unpack_bits(packed: torch.Tensor, count: int, width: int) -> torch.Tensor:
    """Inverse of `pack_bits`: the first `count` codes of `width` bits, as int64."""
    shifts = torch.arange(8, dtype=torch.int64)
    bits = ((packed.to(torch.int64)[:, None] >> shifts) & 1).reshape(-1)  # (8·bytes,)
    bits = bits[:count * width].reshape(count, width)  # (n, width)
    return (bits << torch.arange(width, dtype=torch.int64)).sum(1)  # (n,) int64 codes


def as_bytes(tensor: torch.Tensor) -> torch.Tensor:
    """The raw bytes of a tensor (float32 or int32), as a flat uint8 tensor."""
    return tensor.contiguous().reshape(-1).view(torch.uint8)  # (numel·itemsize,) uint8


def from_bytes(raw: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Raw bytes back to a flat tensor of `dtype` (copied: a slice may be misaligned)."""
    return raw.clone().view(dtype)  # (bytes/itemsize,) dtype
