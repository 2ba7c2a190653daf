"""The chain rule at small elementwise Nodes: each input's local derivative, read from what the Node
saved while backward runs through it (after that, a backward without retain_graph frees it)."""

from __future__ import annotations

from typing import Callable, Optional

import torch

SMALL = 64  # elements: the inspector shows the numbers of tensors up to this size


def _saved(node, name: str):
    value = getattr(node, f"_saved_{name}")
    return value if isinstance(value, torch.Tensor) else torch.tensor(value, dtype=torch.float64)


def _one(node):
    return torch.tensor(1.0, dtype=torch.float64)


# Node name → per input (forward argument order), the formula and the local derivative ∂out/∂input.
_Rule = tuple[str, Callable]
LOCAL_DERIVATIVES: dict[str, list[_Rule]] = {
    "AddBackward0": [("∂(a+αb)/∂a = 1", _one), ("∂(a+αb)/∂b = α", lambda n: _saved(n, "alpha"))],
    "AddBackward1": [("∂(a+c)/∂a = 1", _one)],
    "SubBackward0": [("∂(a−αb)/∂a = 1", _one), ("∂(a−αb)/∂b = −α", lambda n: -_saved(n, "alpha"))],
    "SubBackward1": [("∂(a−c)/∂a = 1", _one)],
    "RsubBackward1": [("∂(c−αa)/∂a = −α", lambda n: -_saved(n, "alpha"))],
    "MulBackward0": [("∂(a·b)/∂a = b", lambda n: _saved(n, "other")),
                     ("∂(a·b)/∂b = a", lambda n: _saved(n, "self"))],
    "MulBackward1": [("∂(a·c)/∂a = c", lambda n: _saved(n, "other"))],
    "DivBackward0": [("∂(a/b)/∂a = 1/b", lambda n: 1 / _saved(n, "other")),
                     ("∂(a/b)/∂b = −a/b²", lambda n: -_saved(n, "self") / _saved(n, "other") ** 2)],
    "DivBackward1": [("∂(a/c)/∂a = 1/c", lambda n: 1 / _saved(n, "other"))],
    "NegBackward0": [("∂(−a)/∂a = −1", lambda n: -_one(n))],
    "PowBackward0": [("∂(aᵖ)/∂a = p·aᵖ⁻¹",
                      lambda n: _saved(n, "exponent") * _saved(n, "self") ** (_saved(n, "exponent") - 1))],
    "ExpBackward0": [("∂(eᵃ)/∂a = eᵃ", lambda n: _saved(n, "result"))],
    "LogBackward0": [("∂(log a)/∂a = 1/a", lambda n: 1 / _saved(n, "self"))],
    "SqrtBackward0": [("∂(√a)/∂a = 1/(2√a)", lambda n: 1 / (2 * _saved(n, "result")))],
    "SinBackward0": [("∂(sin a)/∂a = cos a", lambda n: torch.cos(_saved(n, "self")))],
    "CosBackward0": [("∂(cos a)/∂a = −sin a", lambda n: -torch.sin(_saved(n, "self")))],
    "TanhBackward0": [("∂(tanh a)/∂a = 1 − tanh²a", lambda n: 1 - _saved(n, "result") ** 2)],
    "SigmoidBackward0": [("∂σ(a)/∂a = σ(a)(1 − σ(a))", lambda n: _saved(n, "result") * (1 - _saved(n, "result")))],
    "ReluBackward0": [("∂relu(a)/∂a = [a > 0]", lambda n: (_saved(n, "result") > 0).to(torch.float64))],
    "AbsBackward0": [("∂|a|/∂a = sign a", lambda n: torch.sign(_saved(n, "self")))],
}


def local_derivatives(node, output: Optional[torch.Tensor]) -> Optional[list[Optional[torch.Tensor]]]:
    """Per input of an elementwise ``node``, its local derivative broadcast to the output's shape and
    flattened (float64, on the output's device: reading the numbers waits for the device, so that is
    left to whoever shows them); None when the Node is not one of ``LOCAL_DERIVATIVES`` or its output
    is over ``SMALL`` elements. An input the Node saved nothing for (it needs no gradient) gets None.

    Call it while backward runs through the Node (a Node hook): its saved tensors still exist.

    >>> x, y = torch.tensor([2.], requires_grad=True), torch.tensor([3.], requires_grad=True)
    >>> z = x * y
    >>> [d.tolist() for d in local_derivatives(z.grad_fn, z)]
    [[3.0], [2.0]]
    """
    rules = LOCAL_DERIVATIVES.get(node.name())
    if rules is None or output is None or output.numel() > SMALL:
        return None
    out = []
    for _, rule in rules:
        try:
            local = torch.as_tensor(rule(node), device=output.device).detach().to(torch.float64)
            out.append(local.broadcast_to(output.shape).flatten())
        except (RuntimeError, AttributeError, TypeError):  # freed, or a variant we do not know
            out.append(None)
    return out


def formulas(name: str) -> list[str]:
    """The formula of each input's local derivative for a Node named ``name`` (empty if unknown).

    >>> formulas("MulBackward0")[0]
    '∂(a·b)/∂a = b'
    """
    return [formula for formula, _ in LOCAL_DERIVATIVES.get(name, [])]
