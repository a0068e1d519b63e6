"""Chapter 10 (issue 52): the real-scale table of SDP on Llama 3 8B shapes is its closed forms:
k = N is DDP (16Ψ of states, 2(N−1)/N·4Ψ bytes), and forward masking's states fall with k."""

from parlab.subnet.explore.real_scale import model_split, sdp_at_scale


def test_k_equal_n_is_ddp_and_states_fall_with_k(capsys):
    blocks, block, shared = model_split("llama3-8b")
    psi = blocks * block + shared
    assert psi == 8_030_261_248  # the preset's parameter count
    rows = sdp_at_scale("llama3-8b", 8, "H100")
    ddp = rows[-1]
    assert ddp["k"] == 8 and ddp["forward_states"] == ddp["backward_states"] == 16 * psi
    assert ddp["sent"] == 2 * 7 * 4 * psi // 8
    states = [r["forward_states"] for r in rows]
    assert states == sorted(states)
    assert "DDP's states do NOT fit" in capsys.readouterr().out
