"""Chapter 10's 'what crosses ranks', from the ledger: forward masking sends gradients only,
backward masking the refresh's parameters too (a table as `explore.sweep` builds it)."""

import pandas as pd

from parlab.subnet import explore


def test_what_crosses_splits_gradients_and_parameters(capsys):
    table = pd.DataFrame([
        {"k": 1, "mask": "forward", "granularity": "block", "sent_per_step": 16_640, "refresh_per_step": 0},
        {"k": 1, "mask": "backward", "granularity": "block", "sent_per_step": 115_968,
         "refresh_per_step": 99_328}])
    explore.what_crosses(table)
    out = capsys.readouterr().out
    assert "parameters (refresh)  99,328 B (86%)" in out
    assert "no refresh byte in any forward row): holds" in out
    assert "up to 99,328 B per step of refresh (k=1, block)" in out
