"""Impulse init beyond attention (pure torch): a Swin window's relative position bias, and token-mixing MLPs.

A Swin ``WindowAttention`` adds a learned bias ``B[dy, dx]`` per head to ``q k^T``, indexed by the offset of key
from query inside the window; an impulse filter is then exact: a logit ``L`` at the head's offset and 0 elsewhere
puts ``e^L / (e^L + n - 1)`` of the attention on the target in a window of ``n`` keys, whatever the image
(:func:`relative_bias_impulse`).

An MLP-Mixer's token MLP is shared by every channel: one block is one spatial mixing ``T`` (``N x N``, tokens).
With GELU's identity ``GELU(z) - GELU(-z) = z``, a hidden layer of ``2r`` units carries a rank-``r`` linear map
exactly: ``fc1 = [B; -B]``, ``fc2 = [A, -A]``, zero biases give ``MLP(x) = A B x`` (:func:`token_mlp_pairs`).
A gated token MLP (gMixer's ``GluMlp``) is exact at rank ``hidden``: a constant gate (weights 0, logit 1) scales the
value half, ``fc2`` divides it out (:func:`token_glu_weights`). ResMLP's ``linear_tokens`` and gMLP's
``SpatialGatingUnit.proj`` are one ``N x N`` linear map: ``T`` itself.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F

from .common import to_pair
from .impulse import impulse_targets

__all__ = [
    "TOKEN_MLPS",
    "bias_logit",
    "clip_shifts",
    "low_rank_rows",
    "relative_bias_impulse",
    "shift_mixing",
    "token_glu_weights",
    "token_mlp_offset",
    "token_mlp_pairs",
    "token_mlp_weights",
]

# how a token MLP carries its linear map: "pairs" exactly at rank hidden // 2, "offset" approximately at rank hidden,
# "auto" pairs where they reach the map's full rank (hidden >= 2 N), else offset
TOKEN_MLPS = ("auto", "pairs", "offset")


def bias_logit(sharpness: float, keys: int) -> float:
    """The logit ``L`` that puts ``sharpness`` of a softmax over ``keys`` logits on one, the others at 0:
    ``e^L / (e^L + keys - 1) = sharpness``."""
    if keys < 2:
        return 0.0
    return math.log(sharpness * (keys - 1) / (1 - sharpness))


def clip_shifts(shifts: torch.Tensor, window_size: int | Sequence[int]) -> torch.Tensor:
    """Shifts that fit a ``Wh x Ww`` window: each component clipped to ``[-(W - 1), W - 1]``, the offsets a window
    has (a window that shrank to a small feature map keeps the nearest offset it has)."""
    wh, ww = to_pair(window_size, "window_size")
    limit = torch.tensor([wh - 1, ww - 1])
    return torch.maximum(torch.minimum(torch.as_tensor(shifts).long(), limit), -limit)


def relative_bias_impulse(
    window_size: int | Sequence[int], shifts: torch.Tensor, logit: float, extra_rows: int = 0
) -> torch.Tensor:
    """A relative position bias table, ``(2 Wh - 1)(2 Ww - 1) + extra_rows x heads``: ``logit`` at each head's
    offset, 0 elsewhere (Swin's window, and every table over a ViT's whole grid: timm's ``RelPosBias`` and BEiT,
    transformers' BEiT, whose ``extra_rows`` 3 hold class token to patches, patches to class token and class to
    class).

    timm and transformers index the table by ``(y_q - y_k + Wh - 1)(2 Ww - 1) + (x_q - x_k + Ww - 1)`` (query minus
    key), so the key ``(y + dy, x + dx)`` of head ``(dy, dx)`` sits at row ``(Wh - 1 - dy)(2 Ww - 1) + (Ww - 1 - dx)``.
    """
    wh, ww = to_pair(window_size, "window_size")
    shifts = clip_shifts(shifts, (wh, ww))
    rows = (wh - 1 - shifts[:, 0]) * (2 * ww - 1) + (ww - 1 - shifts[:, 1])
    table = torch.zeros((2 * wh - 1) * (2 * ww - 1) + extra_rows, len(shifts))
    table[rows, torch.arange(len(shifts))] = logit
    return table


def shift_mixing(grid_size: int | Sequence[int], shifts: torch.Tensor) -> torch.Tensor:
    """The token map ``T`` (``N x N``, output token by input token) that averages the shifts: row ``(r, c)`` takes
    ``1 / m`` from each token ``(r + dy, c + dx)`` inside the grid (zero padding), ``m`` the number of shifts."""
    return impulse_targets(grid_size, shifts).mean(0)


def low_rank_rows(target: torch.Tensor, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``A`` (``N x r``) and ``B`` (``r x N``) with ``A B`` the best rank-``r`` approximation of ``target``.

    At full rank ``A = I`` and ``B = target``, exactly. Below it, from the SVD in float64; a shift's singular values
    are all 1, so for one shift any ``r`` of its rows are optimal: the SVD's choice is whichever LAPACK makes, so a
    single shift keeps its first ``r`` non-zero rows instead (deterministic on every device).
    """
    n = target.shape[0]
    if rank >= n:
        return torch.eye(n), target.clone()
    rows = target.abs().sum(1) > 0
    if ((target != 0).sum(1) <= 1).all():  # one shift (a partial permutation): keep its first rank rows
        keep = rows.nonzero().flatten()[:rank]
        a = F.one_hot(keep, n).T.float()
        return a, target[keep]
    u, s, vh = torch.linalg.svd(target.double())
    return (u[:, :rank] * s[:rank]).float(), vh[:rank].float()


def token_mlp_pairs(target: torch.Tensor, hidden: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``fc1`` weight and bias, ``fc2`` weight and bias of a GELU MLP (``N -> hidden -> N``) equal to the best
    rank-``hidden // 2`` approximation of ``target``: units in pairs ``+b, -b`` and ``GELU(z) - GELU(-z) = z``.
    An odd unit left over gets zero weights."""
    n = target.shape[0]
    a, b = low_rank_rows(target, hidden // 2)
    r = b.shape[0]
    fc1 = torch.zeros(hidden, n)
    fc2 = torch.zeros(n, hidden)
    fc1[:r], fc1[r : 2 * r] = b, -b
    fc2[:, :r], fc2[:, r : 2 * r] = a, -a
    return fc1, torch.zeros(hidden), fc2, torch.zeros(n)


def token_mlp_offset(
    target: torch.Tensor, hidden: int, offset: float = 3.0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The same MLP at rank ``hidden`` (twice :func:`token_mlp_pairs`'s), approximately: each unit reads ``b x + c``
    with ``c = offset`` where GELU is near the identity, and ``fc2`` subtracts ``A GELU(c)``; exact only as
    ``c -> inf`` (at ``c = 3`` and unit inputs, ``GELU(z + 3) - GELU(3)`` is within about 0.05 of ``z`` for
    ``|z| < 1.5``)."""
    n = target.shape[0]
    a, b = low_rank_rows(target, hidden)
    r = b.shape[0]
    fc1 = torch.zeros(hidden, n)
    fc2 = torch.zeros(n, hidden)
    fc1[:r] = b
    fc2[:, :r] = a
    bias1 = torch.zeros(hidden)
    bias1[:r] = offset
    return fc1, bias1, fc2, -fc2 @ F.gelu(bias1)


def token_mlp_weights(
    target: torch.Tensor, hidden: int, construction: str = "auto"
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """A token MLP's ``fc1`` weight, bias, ``fc2`` weight, bias acting as ``target`` at init, by ``construction``
    (one of :data:`TOKEN_MLPS`)."""
    if construction not in TOKEN_MLPS:
        raise ValueError(f"unknown token_mlp {construction!r}; expected one of {', '.join(TOKEN_MLPS)}")
    if construction == "auto":
        construction = "pairs" if hidden >= 2 * target.shape[0] else "offset"
    return (token_mlp_pairs if construction == "pairs" else token_mlp_offset)(target, hidden)


def token_glu_weights(
    target: torch.Tensor, hidden: int, gate: float, gate_last: bool = True
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """A gated token MLP (``fc1``: ``N -> 2 hidden`` split into value and gate halves, ``fc2``: ``hidden -> N``)
    equal to the best rank-``hidden`` approximation of ``target``: the gate half has zero weights and bias 1, so it
    multiplies the value half by ``gate`` (the activation at 1), which ``fc2`` divides out."""
    n = target.shape[0]
    a, b = low_rank_rows(target, hidden)
    r = b.shape[0]
    value, gate_bias = torch.zeros(hidden, n), torch.ones(hidden)
    value[:r] = b
    fc2 = torch.zeros(n, hidden)
    fc2[:, :r] = a / gate
    halves = (value, torch.zeros(hidden, n)) if gate_last else (torch.zeros(hidden, n), value)
    biases = (torch.zeros(hidden), gate_bias) if gate_last else (gate_bias, torch.zeros(hidden))
    return torch.cat(halves), torch.cat(biases), fc2, torch.zeros(n)
