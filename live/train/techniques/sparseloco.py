"""SparseLoCo (Sarfi et al. 2025, arXiv:2508.15706): DiLoCo whose synchronization sends a
top-k, few-bit pseudo-gradient, with error feedback.

Per replica, at each synchronization (every H inner steps; see diloco.py for the layout):

    acc      = pseudo-gradient + error buffer
    kept     = the k = topk x chunk largest |acc| in each chunk of `chunk` values
    sent     = kept, quantized to `bits` bits with one fp32 scale per chunk
    error    = acc - sent          (what was not sent: the dropped values and the rounding)

The replicas all-gather their sparse payloads (sparse vectors with different index sets
cannot be summed on the way, as a ring all-reduce would), each decodes all R and averages
them, and the outer step applies the average (default: outer SGD with lr 1, no momentum,
as in the paper's SparseLoCo; --outer-lr / --outer-momentum change it).

Payload per chunk, as sent: the quantized codes packed `8 / bits` to a byte
(ceil(k x bits / 8) bytes), k uint16 chunk-local indices, one float32 scale. bits = 32
sends the kept values as float32 without quantization (no scales).

Each device of a replica compresses its own slice of the flat pseudo-gradient (the slice
is a whole number of chunks) and keeps that slice of the error buffer, so the buffer is
sharded over the replica's devices and every payload byte crosses between replicas once.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from geosim.base.errors import GeosimError
from geosim.live.train.lowcomm import BITS
from geosim.live.train.techniques.diloco import DiLoCo


def kept_per_chunk(topk: float, chunk: int) -> int:
    return max(1, min(chunk, round(topk * chunk)))


def compress(acc, topk: float, bits: int, chunk: int):
    """acc: float32 [S], S a multiple of chunk -> (payload, sent): the arrays that cross the
    network and the dense vector they decode to (what this replica contributes)."""
    chunks = acc.reshape(-1, chunk)
    n_chunks, k = chunks.shape[0], kept_per_chunk(topk, chunk)
    _, index = jax.lax.top_k(jnp.abs(chunks), k)  # [n_chunks, k]
    values = jnp.take_along_axis(chunks, index, axis=1)
    index16 = index.astype(jnp.uint16)
    if bits == 32:
        payload = (values, index16)
    else:
        levels = 2 ** bits
        scale = jnp.max(jnp.abs(values), axis=1)  # [n_chunks]
        step = jnp.where(scale > 0, 2 * scale / levels, 1.0)[:, None]
        q = jnp.clip(jnp.floor(values / step), -(levels // 2), levels // 2 - 1)  # midrise: levels (q + 1/2) x step
        codes = (q + levels // 2).astype(jnp.uint8)
        payload = (pack(codes, bits), index16, scale)
    return payload, decompress(payload, topk, bits, chunk, n_chunks * chunk)


def decompress(payload, topk: float, bits: int, chunk: int, size: int):
    k = kept_per_chunk(topk, chunk)
    n_chunks = size // chunk
    if bits == 32:
        values, index16 = payload
    else:
        packed, index16, scale = payload
        levels = 2 ** bits
        q = unpack(packed, bits, k).astype(jnp.float32) - levels // 2
        step = jnp.where(scale > 0, 2 * scale / levels, 1.0)[:, None]
        values = (q + 0.5) * step
    rows = jnp.arange(n_chunks)[:, None]
    dense = jnp.zeros((n_chunks, chunk), jnp.float32).at[rows, index16.astype(jnp.int32)].set(values)
    return dense.reshape(size)


def pack(codes, bits: int):
    """uint8 codes < 2**bits, [rows, k] -> [rows, ceil(k x bits / 8)] bytes, 8 / bits codes a byte."""
    per = 8 // bits
    rows, k = codes.shape
    width = -(-k // per)
    codes = jnp.pad(codes, ((0, 0), (0, width * per - k))).reshape(rows, width, per)
    shifts = (bits * jnp.arange(per)).astype(jnp.uint8)
    return jnp.sum(jnp.left_shift(codes, shifts).astype(jnp.uint32), axis=2).astype(jnp.uint8)  # disjoint bits: sum = or


def unpack(packed, bits: int, k: int):
    per = 8 // bits
    shifts = (bits * jnp.arange(per)).astype(jnp.uint8)
    codes = jnp.bitwise_and(jnp.right_shift(packed[..., None], shifts), jnp.uint8(2 ** bits - 1))
    return codes.reshape(packed.shape[0], -1)[:, :k]


def payload_bytes(size: int, topk: float, bits: int, chunk: int) -> dict:
    """Bytes of one compressed payload of `size` values (a multiple of chunk), by part."""
    n_chunks, k = size // chunk, kept_per_chunk(topk, chunk)
    parts = {"values": n_chunks * (-(-k * bits // 8) if bits < 32 else 4 * k), "indices": n_chunks * k * 2,
             "scales": 0 if bits == 32 else n_chunks * 4}
    parts["total"] = sum(parts.values())
    return parts


class SparseLoCo(DiLoCo):
    name = "sparseloco"

    def __init__(self, setup, **options):
        super().__init__(setup, **options)
        self.topk, self.bits, self.chunk = float(self.options["topk_fraction"]), int(self.options["bits"]), int(self.options["chunk"])
        if not 0 < self.topk <= 1:
            raise GeosimError(f"must be in (0, 1], got {self.topk:g}", key="--topk")
        if self.bits not in BITS:
            raise GeosimError(f"must be one of {', '.join(map(str, BITS))} (32: no quantization), got {self.bits}",
                              key="--bits")
        if self.chunk <= 0 or self.chunk > 65536:
            raise GeosimError("chunk must be in 1..65536 (uint16 indices)", key="chunk")

    def slice_size(self, size: int) -> int:
        return math.ceil(size / self.per_replica / self.chunk) * self.chunk

    def init_extra(self):
        shape = (self.replicas, self.per_replica, self._slice)
        sharding = NamedSharding(self.mesh, P(self.replica_axis, self.axis))
        return (jax.jit(lambda: jnp.zeros(shape, jnp.float32), out_shardings=sharding)(),)

    def extra_specs(self):
        return (P(self.replica_axis, self.axis),)

    def average_slice(self, delta_slice, extra):
        (error,) = extra
        acc = error[0, 0] + delta_slice
        payload, sent = compress(acc, self.topk, self.bits, self.chunk)
        gathered = tuple(jax.lax.all_gather(part, self.replica_axis) for part in payload)  # [R, ...] each
        dense = jax.vmap(lambda *p: decompress(p, self.topk, self.bits, self.chunk, self._slice))(*gathered)
        return jnp.mean(dense, axis=0), ((acc - sent)[None, None],)

    def sync_bytes_per_replica(self) -> float:
        return float(payload_bytes(self._slice, self.topk, self.bits, self.chunk)["total"] * self.per_replica)


TECHNIQUE = SparseLoCo
