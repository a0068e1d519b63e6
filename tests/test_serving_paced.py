"""Chapter 12, Part B on a real edge device's paced clock: split inference over the Jetson Nano
(`parlab.core.link.EDGE_DEVICES`) and real links (`parlab.core.link.WIRELESS`, 1GbE) keeps virtual
time — the same to the bit on every run, never this CPU's — and its latency is the model's
P_N + k·α + bytes/β in direction; the break-even β* with the split's own compute P_N is where
the model's latency equals one device's."""

import math

import pytest
import torch

from parlab.core import link as link_mod
from parlab.serving import cost, edge, grouped

CFG = grouped.GroupedConfig()


@pytest.fixture(scope="module")
def runs():
    """One small net, a request of 16 images: one device, and two devices on free links and
    over Wi-Fi 802.11n (paced Jetson Nano time), twice."""
    net = grouped.GroupedNet(CFG, seed=0)
    x = torch.randn(16, 1, 16, 16, generator=torch.Generator().manual_seed(0))
    out = {"net": net, "x": x, "alone": edge.run_edge(net, x, 1, clock=edge.EDGE_DEVICE)}
    for name in ("loopback", "Wi-Fi"):
        out[name] = edge.run_edge(net, x, 2, link=name, clock=edge.EDGE_DEVICE)
    out["again"] = edge.run_edge(net, x, 2, link="Wi-Fi", clock=edge.EDGE_DEVICE)
    return out


def test_edge_links_and_device_are_real_presets():
    assert edge.EDGE_LINKS["Wi-Fi"] is link_mod.WIRELESS["802.11n"]
    assert edge.EDGE_LINKS["Bluetooth"] is link_mod.WIRELESS["BLE-2M"]
    assert edge.EDGE_LINKS["1GbE"] == link_mod.real("1GbE")
    assert link_mod.WIRELESS["802.11n"].bandwidth_Bps == 65e6 / 8
    assert link_mod.WIRELESS["BLE-2M"].bandwidth_Bps == 2e6 / 8
    assert not any("-like" in str(link) for link in edge.EDGE_LINKS.values())
    nano = link_mod.EDGE_DEVICES["Jetson-Nano"]
    assert nano.peak_flops == 472e9 and nano.hbm_Bps == 25.6e9
    assert edge.edge_clock(edge.EDGE_DEVICE).label == "Jetson Nano time"
    assert "Jetson-Nano" not in link_mod.ACCELERATORS  # the data-centre list is unchanged


def test_paced_latency_is_bit_reproducible_and_exact(runs):
    assert runs["again"].latencies == runs["Wi-Fi"].latencies  # virtual time: equal, not close
    assert runs["Wi-Fi"].clock.label == "Jetson Nano time"
    assert torch.allclose(runs["Wi-Fi"].logits, runs["net"](runs["x"]).detach(), rtol=1e-4, atol=1e-5)
    alone = runs["alone"]
    assert alone.latency == alone.pace["paced_s"]  # one device: its priced compute, nothing else
    assert runs["loopback"].latency < runs["Wi-Fi"].latency


def test_model_agrees_in_direction_with_the_paced_run(runs):
    net, alone, split = runs["net"], runs["alone"].latency, runs["loopback"].latency
    nbytes = cost.edge_critical_bytes(CFG, net.masks, 2, 16)
    rounds = cost.edge_rounds(CFG, 2, net.masks)
    for name in ("Wi-Fi",):
        link = edge.EDGE_LINKS[name]
        model = cost.edge_latency(alone, nbytes, rounds, 2, link, split)
        measured = runs[name].latency
        assert (model < alone) == (measured < alone)
        assert model == pytest.approx(measured, rel=0.01)


def test_break_even_with_the_split_s_own_compute():
    link = link_mod.Link(1e-3, 1.0)
    star = cost.break_even_bandwidth(0.02, 40_000, 3, 2, 1e-3, split_s=0.012)  # saves 8 ms − 3 ms
    assert star == pytest.approx(40_000 / 0.005)
    assert cost.edge_latency(0.02, 40_000, 3, 2, link_mod.Link(1e-3, star), 0.012) == pytest.approx(0.02)
    assert math.isinf(cost.break_even_bandwidth(0.02, 40_000, 3, 2, 3e-3, split_s=0.012))
    assert cost.edge_latency(0.02, 0, 0, 2, None, 0.012) == 0.012
    assert link.cost(0) == 1e-3


def test_critical_bytes_sum_each_exchange_s_busiest_sender():
    """Block 0: only device 1 sends (channel 1 of group 2 to group 0); block 1: only device 0
    (channel 3 of group 0 to group 2): the request waits for both, more than either device's total."""
    m0 = torch.zeros(4, 4, 8, dtype=torch.bool)
    m0[2, 0, 1] = True
    m1 = torch.zeros(4, 4, 8, dtype=torch.bool)
    m1[0, 2, 3] = True
    per = cost.edge_bytes(CFG, [m0, m1], 2, 1)
    assert [sum(p.values()) for p in per] == [4 * 4 * 4, 8 * 8 * 4 + 10 * 4]
    assert cost.edge_critical_bytes(CFG, [m0, m1], 2, 1) == 8 * 8 * 4 + 4 * 4 * 4 + 10 * 4
