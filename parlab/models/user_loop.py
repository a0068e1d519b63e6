"""A user's model and one-process reference, for the chapters' library demonstrations.

PyTorch's `DistributedDataParallel` and `fully_shard` wrap any `nn.Module` and leave the loop, the
optimizer and the data to the user; chapters 01 and 02 show their wrappers the same way
(`parlab.data_parallel.explore.library`, `parlab.zero.explore.library`) on this model, as real
ones are — an embedding tied to the head, a frozen layer, a buffer — and check each against
plain PyTorch on the whole batch in one process (`compare`).
"""

from __future__ import annotations

import torch

ROWS, VOCAB, WIDTH = 12, 16, 8


class TiedNet(torch.nn.Module):
    """An embedding tied to the output head, a frozen layer, two residual blocks, a buffer."""

    def __init__(self, seed: int = 0):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.embed = torch.nn.Embedding(VOCAB, WIDTH)
        self.frozen = torch.nn.Linear(WIDTH, WIDTH)
        self.blocks = torch.nn.ModuleList(
            torch.nn.Sequential(torch.nn.Linear(WIDTH, WIDTH), torch.nn.Tanh()) for _ in range(2))
        self.head = torch.nn.Linear(WIDTH, VOCAB, bias=False)
        self.head.weight = self.embed.weight  # tied: one Parameter, two modules
        self.register_buffer("scale", torch.tensor(1.0 + seed))
        with torch.no_grad():
            for p in self.parameters():
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)
        self.frozen.requires_grad_(False)

    def forward(self, idx):
        h = torch.tanh(self.frozen(self.embed(idx)))  # (B, width)
        for block in self.blocks:
            h = h + block(h)  # (B, width)
        return self.head(h * self.scale)  # (B, vocab)


def batch(step: int):
    g = torch.Generator().manual_seed(100 + step)
    return torch.randint(VOCAB, (ROWS,), generator=g), torch.randint(VOCAB, (ROWS,), generator=g)


def make_optimizer(params):
    return torch.optim.AdamW(params, lr=0.05, betas=(0.9, 0.95), weight_decay=0.1)


def trainable(model):
    return [p for p in model.parameters() if p.requires_grad]


def single_process_state(steps: int) -> dict:
    """Plain PyTorch in one process on the whole batch, from rank 0's initial weights."""
    model = TiedNet(0)
    return train_whole_batch(model, make_optimizer(trainable(model)), steps)


def train_whole_batch(model, optimizer, steps: int) -> dict:
    """`steps` steps of the user's loop on the whole batch in one process: the final parameters."""
    for step in range(steps):
        x, y = batch(step)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def compare(rank_worker, world_size: int, steps: int, wrappers) -> dict:
    """Each wrapper run by `rank_worker` on `world_size` ranks against `single`; prints the
    largest difference and `match: True/False` (1e-4) per wrapper; returns {wrapper: match}."""
    from parlab.core.launch import launch

    if ROWS % world_size:
        raise ValueError(f"world_size={world_size} must divide the batch of {ROWS} rows")
    reference = single_process_state(steps)
    matches = {}
    for wrapper in wrappers:
        state = launch(rank_worker, world_size, wrapper, steps)[0]
        diff = max((state[n] - reference[n]).abs().max().item() for n in reference)
        matches[wrapper] = diff <= 1e-4
        print(f"{wrapper:6s} on {world_size} rank(s), your loop and optimizer: max |Δparam| vs one "
              f"process {diff:.1e}, match: {matches[wrapper]}")
    return matches
