"""Impulse init through an attention's own position term (pure torch): a relative position MLP, and rotary attention.

Bias tables (Swin, timm's ``RelPosBias`` and BEiT, transformers' BEiT) take the impulse exactly through
:func:`~.token_mixing.relative_bias_impulse`. Two position terms have no table:

- timm's ``RelPosMlp`` computes the bias of offset ``d`` as ``fc2(relu(fc1(u(d))))`` from log-spaced coordinates
  ``u(d)`` (monotone in ``d``): four ReLU units per head make ``|u_y - u_y(s)| + |u_x - u_x(s)|``, which is 0 at the
  head's offset ``s`` only, and ``fc2`` weighs it so that the nearest other offset scores ``L`` below the target
  (:func:`relpos_mlp_impulse`).
- A rotary (RoPE) head scores tokens ``m, n`` by ``q_m^T R(n - m) k_n``: its position enters only through the
  rotation of the part of ``q`` and ``k`` that every token shares (the projections' biases). With key bias
  ``c = R(-s) a`` the shared part scores ``sum_i |a_i|^2 cos(w_i . (n - m - s))`` over the rotation pairs ``i``: a
  kernel that peaks at offset ``s``. :func:`rope_shared_bias` weighs the pairs and sets the scale so that the kernel
  puts ``sharpness`` of each query's attention on its target.
"""

from __future__ import annotations

import torch

from .common import to_pair
from .solvers import shift_index

__all__ = ["apply_rotation", "relpos_mlp_impulse", "rope_shared_bias"]


def _bias_mass(bias: torch.Tensor, grid: tuple[int, int], shifts: torch.Tensor, prefix: int) -> torch.Tensor:
    """Mean softmax weight on each head's target when the logits are the relative bias alone (``bias``: ``heads x
    2h - 1 x 2w - 1``, indexed by query minus key; ``prefix`` keys at logit 0); over the queries whose target is in."""
    h, w = grid
    rows, cols = torch.arange(h).repeat_interleave(w), torch.arange(w).repeat(h)
    logits = bias[:, (rows[:, None] - rows[None] + h - 1), (cols[:, None] - cols[None] + w - 1)]  # heads x N x N
    logits = torch.cat([torch.zeros(len(bias), h * w, prefix), logits], -1)
    target, valid = shift_index(grid, shifts)
    mass = logits.softmax(-1).gather(-1, (target + prefix).unsqueeze(-1)).squeeze(-1)
    return torch.stack([m[v].mean() if v.any() else torch.tensor(1.0) for m, v in zip(mass, valid, strict=True)])


def relpos_mlp_impulse(
    coords: torch.Tensor,
    shifts: torch.Tensor,
    sharpness: float,
    hidden: int,
    sigmoid_gain: float | None = None,
    prefix_tokens: int = 0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``fc1`` weight and bias, ``fc2`` weight and bias of a ReLU MLP (``2 -> hidden -> heads``) whose output on the
    relative coordinates ``coords`` (``2 h - 1 x 2 w - 1 x 2``, offset ``query - key``, monotone in it) peaks at each
    head's offset and falls with the distance from it in those coordinates, as steeply as puts ``sharpness`` of each
    query's attention on its target over the ``h x w`` grid (bisection; ``prefix_tokens`` keys score 0).
    ``sigmoid_gain``: the output passes through ``gain * sigmoid`` (timm's ``mode='swin'``)."""
    heads = len(shifts)
    rows, cols = coords.shape[0], coords.shape[1]
    needed = 4 * heads + 1
    if hidden < needed:
        raise ValueError(f"a relative position MLP of {hidden} hidden units cannot carry {heads} impulses ({needed})")
    grid = ((rows + 1) // 2, (cols + 1) // 2)
    target = coords[grid[0] - 1 - shifts[:, 0], grid[1] - 1 - shifts[:, 1]]  # heads x 2: query - key = -shift
    distance = (coords.unsqueeze(0) - target.reshape(heads, 1, 1, 2)).abs().sum(-1)  # heads x rows x cols
    top = 4.0  # the target's output (e^4 over a prefix key's 0; under a sigmoid gain, near the curve's top)

    def output(steepness: torch.Tensor) -> torch.Tensor:
        z = top - steepness.reshape(-1, 1, 1) * distance
        return z if sigmoid_gain is None else sigmoid_gain * torch.sigmoid(z)

    low, high = torch.zeros(heads), torch.full((heads,), 1e3)
    for _ in range(60):  # the mass on target grows with the steepness
        mid = (low + high) / 2
        short = _bias_mass(output(mid), grid, shifts, prefix_tokens) < sharpness
        low, high = torch.where(short, mid, low), torch.where(short, high, mid)
    fc1, bias1 = torch.zeros(hidden, 2), torch.zeros(hidden)
    fc2, bias2 = torch.zeros(heads, hidden), torch.zeros(heads)
    bias1[-1] = 1.0  # a constant unit carries the target's output where fc2 has no bias
    for head in range(heads):
        units = slice(4 * head, 4 * head + 4)
        fc1[units] = torch.tensor([[1.0, 0.0], [-1.0, 0.0], [0.0, 1.0], [0.0, -1.0]])
        bias1[units] = torch.stack([-target[head, 0], target[head, 0], -target[head, 1], target[head, 1]])
        fc2[head, units] = -high[head]
        fc2[head, -1] = top
    return fc1, bias1, fc2, bias2


def apply_rotation(x: torch.Tensor, embedding: torch.Tensor, half: bool, inverse: bool = False) -> torch.Tensor:
    """Rotate ``x`` (``... x d``) by a RoPE embedding ``[sin | cos]`` (``... x 2d``): each pair of channels (``2i,
    2i + 1``, or ``i, i + d/2`` when ``half``) turns by its angle (``inverse``: back)."""
    sin, cos = embedding.chunk(2, -1)
    if half:
        first, second = x.chunk(2, -1)
        turned = torch.cat([-second, first], -1)
    else:
        turned = torch.stack([-x[..., 1::2], x[..., ::2]], -1).reshape(x.shape)
    return x * cos + turned * (-sin if inverse else sin)


def _pair_basis(head_dim: int, half: bool) -> torch.Tensor:
    """One unit vector per rotation pair (its first channel): ``pairs x head_dim``."""
    first = torch.arange(head_dim // 2) if half else torch.arange(0, head_dim, 2)
    return torch.nn.functional.one_hot(first, head_dim).float()


def _target_mass(logits: torch.Tensor, target: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Mean softmax weight on the target over the valid rows (``logits``: ``rows x keys``)."""
    probs = logits.softmax(-1).gather(-1, target.unsqueeze(-1)).squeeze(-1)
    return probs[valid].mean()


def rope_shared_bias(
    embedding: torch.Tensor,
    grid_size: tuple[int, int],
    shifts: torch.Tensor,
    sharpness: float,
    scale: float,
    half: bool = False,
    prefix_tokens: int = 0,
    steps: int = 200,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Query and key biases (``heads x head_dim``) of rotary heads whose shared part puts ``sharpness`` of each
    query's attention on ``query + s_h``, and the mass reached per head (on the rotated biases alone).

    ``embedding``: the RoPE ``[sin | cos]`` of every patch token, ``N x 2 head_dim`` or per head ``heads x N x 2
    head_dim``; ``scale`` the logits' factor (``head_dim ** -0.5``); ``prefix_tokens`` tokens that are not rotated but
    share the key bias (their logit competes with the target). Pair weights ``rho >= 0`` (query bias ``sqrt(rho)``
    per pair, key bias the same turned by ``-s``) maximise the target's log-probability (``steps`` of Adam, from equal
    weights), then a bisection on their scale sets the mass; a head whose kernel cannot reach it keeps the most.
    """
    h, w = to_pair(grid_size)
    heads = len(shifts)
    embedding = embedding.float().expand(heads, *embedding.shape[-2:]) if embedding.dim() == 2 else embedding.float()
    head_dim = embedding.shape[-1] // 2
    basis = _pair_basis(head_dim, half)  # pairs x head_dim
    target, valid = shift_index((h, w), shifts)
    q_bias, k_bias, reached = torch.zeros(heads, head_dim), torch.zeros(heads, head_dim), torch.zeros(heads)
    for head in range(heads):
        rows = valid[head]
        if not rows.any():
            continue
        anchor = int(rows.nonzero()[0])  # any token whose target is inside: the turn by -s is the same from all
        turn = apply_rotation(
            apply_rotation(basis, embedding[head, anchor], half), embedding[head, target[head, anchor]], half, True
        )  # pairs x head_dim: each pair's unit turned by -s
        queries = apply_rotation(basis.unsqueeze(0), embedding[head].unsqueeze(1), half)  # N x pairs x head_dim
        keys = apply_rotation(turn.unsqueeze(0), embedding[head].unsqueeze(1), half)
        features = torch.einsum("mpd,npd->mnp", queries, keys) * scale  # each pair's logit at unit weight
        prefix = torch.einsum("mpd,pd->mp", queries, turn) * scale  # a prefix key: the key bias unrotated
        features = torch.cat([prefix.unsqueeze(1).expand(-1, prefix_tokens, -1), features], 1)
        goal = target[head] + prefix_tokens
        raw = torch.zeros(basis.shape[0], requires_grad=True)
        optimizer = torch.optim.Adam([raw], lr=0.1)
        with torch.enable_grad():
            for _ in range(steps):  # the target's log-probability is concave in the weights
                optimizer.zero_grad()
                logits = features @ raw.exp()
                loss = -logits.log_softmax(-1).gather(-1, goal.unsqueeze(-1)).squeeze(-1)[rows].mean()
                loss.backward()
                optimizer.step()
        weights = raw.detach().exp()
        weights = weights / weights.sum()
        low, high = 0.0, 1.0
        while high < 1e6 and _target_mass(features @ (high * weights), goal, rows) < sharpness:
            high *= 2
        for _ in range(50):
            mid = (low + high) / 2
            low, high = (mid, high) if _target_mass(features @ (mid * weights), goal, rows) < sharpness else (low, mid)
        weights = high * weights
        reached[head] = _target_mass(features @ weights, goal, rows)
        q_bias[head] = weights.sqrt() @ basis
        k_bias[head] = weights.sqrt() @ turn
    return q_bias, k_bias, reached
