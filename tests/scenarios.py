"""The scenarios of ../shared/SCENARIOS.md (S1, S2, M1 ...: the ids tests cite), and helpers the tests share."""

from __future__ import annotations

import gc
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]


def reset_shell(shell) -> None:
    """Unload forgeviz and forget the user's names, so the next test starts clean."""
    shell.run_cell("%unload_ext forgeviz")
    keep = ("In", "Out", "exit", "quit", "get_ipython")
    for name in [k for k in shell.user_ns if not k.startswith("_") and k not in keep]:
        del shell.user_ns[name]
    shell.displayhook.flush()  # the output history (Out, _, __, _3): a cell's shown value lives there
    if "torch._dynamo" in sys.modules:  # Dynamo's caches keep the modules a cell compiled
        torch._dynamo.reset()
    # The last error's traceback holds the frames it passed through, and their tensors.
    sys.last_type = sys.last_value = sys.last_traceback = None
    shell.InteractiveTB.tb = None
    gc.collect()


S1 = """\
x = torch.tensor([2.], requires_grad=True)
y = torch.tensor([3.], requires_grad=True)
z = x * y
w = z + x
loss = w ** 2
"""


def by_label(graph, label: str):
    matches = [n for n in graph.nodes if n.label == label]
    assert len(matches) == 1, f"expected one node labelled {label!r}, got {[n.label for n in graph.nodes]}"
    return matches[0]


def make_cnn(seed: int = 0) -> torch.nn.Module:
    """A small residual CNN written by hand (no torchvision on CPU)."""
    torch.manual_seed(seed)

    class Block(torch.nn.Module):
        def __init__(self, c: int) -> None:
            super().__init__()
            self.conv1 = torch.nn.Conv2d(c, c, 3, padding=1, bias=False)
            self.bn1 = torch.nn.BatchNorm2d(c)
            self.conv2 = torch.nn.Conv2d(c, c, 3, padding=1, bias=False)
            self.bn2 = torch.nn.BatchNorm2d(c)

        def forward(self, x):
            out = torch.relu(self.bn1(self.conv1(x)))
            return torch.relu(self.bn2(self.conv2(out)) + x)

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = torch.nn.Conv2d(3, 8, 3, padding=1)
            self.layer1 = torch.nn.Sequential(Block(8), Block(8))
            self.head = torch.nn.Linear(8, 10)

        def forward(self, x):
            x = self.layer1(torch.relu(self.stem(x)))
            return self.head(x.mean(dim=(2, 3)))

    return Net()


# A long training loop in notebook cells (the small MLP, Adam, losses kept as floats): the bookkeeping
# test and bench_bookkeeping.py run TRAIN_SETUP once, then TRAIN_100_STEPS again and again.
TRAIN_SETUP = """\
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256), torch.nn.ReLU(),
                            torch.nn.Linear(256, 10))
opt = torch.optim.Adam(model.parameters())
x, y = torch.randn(32, 256), torch.randn(32, 10)
losses = []
loss = torch.nn.functional.mse_loss(model(x), y)
"""
TRAIN_100_STEPS = """\
for _ in range(100):
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    losses.append(loss.item())
"""


# GPT-2-small's shape, written by hand (no transformers on CPU): the graph-scale tests, the browser
# test and bench_graph_scale.py build it. ``n_layer`` blocks of width ``d`` with ``n_head`` heads.
GPT2_SOURCE = """\
import math
import torch
import torch.nn as nn
import torch.nn.functional as F


class Attention(nn.Module):
    def __init__(self, d, n_head):
        super().__init__()
        self.n_head = n_head
        self.c_attn = nn.Linear(d, 3 * d)
        self.c_proj = nn.Linear(d, d)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).reshape(B, T, C))


class MLP(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.c_fc = nn.Linear(d, 4 * d)
        self.c_proj = nn.Linear(4 * d, d)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, d, n_head):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d)
        self.attn = Attention(d, n_head)
        self.ln_2 = nn.LayerNorm(d)
        self.mlp = MLP(d)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, vocab=1024, seq=64, d=768, n_layer=12, n_head=12):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(seq, d)
        self.h = nn.ModuleList(Block(d, n_head) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))
"""


def _gpt2_classes() -> dict:
    namespace: dict = {}
    exec(compile(GPT2_SOURCE, "<gpt2>", "exec"), namespace)  # noqa: S102 - our own source, above
    return namespace


def make_blocks(n_layer: int = 2, d: int = 32, n_head: int = 4, seed: int = 0) -> torch.nn.Module:
    """``n_layer`` of GPT-2's blocks in a Sequential: a GPT-2-shaped model for (batch, seq, d) input."""
    block = _gpt2_classes()["Block"]
    torch.manual_seed(seed)
    return torch.nn.Sequential(*[block(d, n_head) for _ in range(n_layer)])


def make_gpt2(n_layer: int = 12, d: int = 768, n_head: int = 12, vocab: int = 1024, seq: int = 64,
              seed: int = 0) -> torch.nn.Module:
    """GPT-2-small's shape (12 blocks, d=768) with a small vocabulary; see GPT2_SOURCE."""
    gpt = _gpt2_classes()["GPT"]
    torch.manual_seed(seed)
    return gpt(vocab=vocab, seq=seq, d=d, n_layer=n_layer, n_head=n_head)
