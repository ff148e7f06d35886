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


def _target_mass(logits: torch.Tensor, goal: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Per head, the mean softmax weight on the target over the valid rows (``logits``: ``heads x rows x keys``)."""
    probs = logits.softmax(-1).gather(-1, goal.unsqueeze(-1)).squeeze(-1)
    return (probs * valid).sum(-1) / valid.sum(-1).clamp_min(1)


def _rope_features(
    embedding: torch.Tensor, target: torch.Tensor, valid: torch.Tensor, half: bool, scale: float, prefix: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each rotation pair's logit at unit weight (``heads x N x prefix + N x pairs``: queries by keys, prefix keys
    first) and each pair's key-bias unit turned by ``-s`` (``heads x pairs x head_dim``)."""
    heads, _, width = embedding.shape
    basis = _pair_basis(width // 2, half)  # pairs x head_dim
    anchor = valid.float().argmax(-1)  # a token whose target is inside: the turn by -s is the same from all
    start = embedding[torch.arange(heads), anchor]  # heads x 2 head_dim
    end = embedding[torch.arange(heads), target[torch.arange(heads), anchor]]
    turn = apply_rotation(apply_rotation(basis, start.unsqueeze(1), half), end.unsqueeze(1), half, inverse=True)
    pairs = torch.arange(basis.shape[0]).unsqueeze(-1)
    channels = basis.argmax(-1).unsqueeze(-1) + torch.tensor([basis.shape[0] if half else 1]) * torch.tensor([0, 1])
    queries = apply_rotation(basis, embedding.unsqueeze(2), half)[..., pairs, channels]  # heads x N x pairs x 2
    keys = apply_rotation(turn.unsqueeze(1), embedding.unsqueeze(2), half)[..., pairs, channels]
    features = torch.einsum("hmpc,hnpc->hmnp", queries, keys) * scale  # a pair's turn stays in its two channels
    prefix_keys = torch.einsum("hmpc,hpc->hmp", queries, turn[:, pairs, channels]) * scale  # a prefix key: unrotated
    features = torch.cat([prefix_keys.unsqueeze(2).expand(-1, -1, prefix, -1), features], 2)
    return features, turn


def rope_shared_bias(
    embedding: torch.Tensor,
    grid_size: tuple[int, int],
    shifts: torch.Tensor,
    sharpness: float,
    scale: float,
    half: bool = False,
    prefix_tokens: int = 0,
    steps: int = 50,
    fit_rows: int = 32,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Query and key biases (``heads x head_dim``) of rotary heads whose shared part puts ``sharpness`` of each
    query's attention on ``query + s_h``, and the mass reached per head (on the rotated biases alone).

    ``embedding``: the RoPE ``[sin | cos]`` of every patch token, ``N x 2 head_dim`` or per head ``heads x N x 2
    head_dim``; ``scale`` the logits' factor (``head_dim ** -0.5``); ``prefix_tokens`` tokens that are not rotated but
    share the key bias (their logit competes with the target). Pair weights ``rho >= 0`` (query bias ``sqrt(rho)``
    per pair, key bias the same turned by ``-s``) maximise the target's log-probability on ``fit_rows`` queries spread
    over the grid (``steps`` of Adam from equal weights, all heads at once), then a bisection on each head's scale sets
    the mass over every query; a head whose kernel cannot reach it keeps the most.
    """
    heads = len(shifts)
    embedding = embedding.float().expand(heads, *embedding.shape[-2:]) if embedding.dim() == 2 else embedding.float()
    target, valid = shift_index(to_pair(grid_size), shifts)
    features, turn = _rope_features(embedding, target, valid, half, scale, prefix_tokens)
    goal, mask = target + prefix_tokens, valid.float()
    rows = torch.linspace(0, len(target[0]) - 1, min(len(target[0]), fit_rows)).round().long()  # spread on the grid
    fit, fit_goal, fit_mask = features[:, rows], goal[:, rows].unsqueeze(-1), mask[:, rows]
    raw = torch.zeros(heads, features.shape[-1], requires_grad=True)
    optimizer = torch.optim.Adam([raw], lr=0.2)
    with torch.enable_grad():
        for _ in range(steps):  # the target's log-probability is concave in the weights
            optimizer.zero_grad()
            chosen = torch.einsum("hmnp,hp->hmn", fit, raw.exp()).log_softmax(-1).gather(-1, fit_goal).squeeze(-1)
            (-(chosen * fit_mask).sum(-1) / fit_mask.sum(-1).clamp_min(1)).sum().backward()
            optimizer.step()
    weights = raw.detach().exp()
    weights = weights / weights.sum(-1, keepdim=True)

    def mass(factor: torch.Tensor) -> torch.Tensor:
        return _target_mass(torch.einsum("hmnp,hp->hmn", features, factor[:, None] * weights), goal, mask)

    low, high = torch.zeros(heads), torch.ones(heads)
    while bool((mass(high) < sharpness).any()) and high.max() < 1e6:
        high = torch.where(mass(high) < sharpness, 2 * high, high)
    for _ in range(20):  # the scale to a millionth of where it started
        mid = (low + high) / 2
        short = mass(mid) < sharpness
        low, high = torch.where(short, mid, low), torch.where(short, high, mid)
    reached, root = mass(high), (high[:, None] * weights).sqrt()
    basis = _pair_basis(embedding.shape[-1] // 2, half)
    return root @ basis, torch.einsum("hp,hpd->hd", root, turn), reached
