"""What notebook 09's sharded-server part runs: the parameters cut over k server ranks (Li et al.,
"Scaling Distributed Machine Learning with the Parameter Server", OSDI 2014), exactness against
`single`, and every server's bytes in and out per update (ledger) beside the closed forms of
`parlab.asynchrony.cost`: under BSP server i carries W·(16 + 4Ψ_i) each way per update, so k
servers cut the busiest link by about k.
"""

from __future__ import annotations

import parlab
from parlab.asynchrony import cost


def sharded_table(world_size: int, steps: int = 3, model: str = "gpt") -> None:
    """ps-sync with k = 1 and k = 2 servers (where a worker is left): match with single, and each
    server's measured bytes per update beside the closed form."""
    ref = parlab.run("single", steps=steps, model=model)
    print(f"{'servers':>7} {'workers':>7} {'server':>6} {'in/update':>10} {'formula':>10} "
          f"{'out/update':>10} {'formula':>10}  equal")
    for k in (1, 2):
        if world_size - k < 1:
            print(f"{k:>7} (world_size={world_size} leaves no worker)")
            continue
        run = parlab.run("ps-sync", world_size=world_size, steps=steps, model=model, servers=k)
        numel = sum(v.numel() for v in run.state.values())
        pairs = cost.server_bytes_per_update(numel, world_size - k, "ssp", k)
        pairs = [pairs] if k == 1 else pairs
        into = run.bytes_per_rank("bytes_recv", phase="push")
        out = run.bytes_per_rank(phase="pull")
        for i, (f_in, f_out) in enumerate(pairs):
            m_in, m_out = into[i] // steps, out[i] // steps
            print(f"{k:>7} {world_size - k:>7} {i:>6} {m_in:>10,} {f_in:>10,} {m_out:>10,} {f_out:>10,}  "
                  f"{(m_in, m_out) == (f_in, f_out) and into[i] % steps == 0}")
        closed = parlab.schemes()["ps-sync"].cost(run.config).bytes_sent
        print(f"{'':>7} ps-sync with servers={k} vs single: match: {run.compare(ref).match}; every rank's "
              f"bytes = closed form: {run.bytes_per_rank() == closed}")
