"""Chapter 12, the transfer search (Lin & Wang 2021 search the transmission policy with NAS and
latency in the objective; ours relaxes it to gates): the four-sensor task needs cross-device
features, the split network with one sensor per group equals one process and its ledger equals the
closed form (a block with no transfer skips its exchange), the relaxed link time is the closed form
at 0/1 gates, and a slower link keeps fewer transfers."""

import pytest
import torch

from parlab.serving import cost, edge, edge_search, grouped, masks, sensors

CFG = grouped.GroupedConfig(sensors=4)


@pytest.fixture(scope="module")
def sensor_net():
    x, y = sensors.load("train")
    net = grouped.GroupedNet(CFG, seed=0)
    grouped.train_grouped(net, x, y, steps=150, batch=32, lr=5e-3)
    return net


def test_sensor_task_is_not_a_sum_over_devices():
    x, y = sensors.load("train")
    assert x.shape == (4000, 4, 16, 16) and y.shape == (4000,)
    assert torch.equal(x, sensors.load("train")[0])  # seeded
    from parlab.serving import images

    px, py = images.load("train")
    # the label is the shape of the door the selector opens
    for i in range(20):
        door = 1 if any(torch.equal(x[i, 2], px[j, 0]) for j in
                        torch.nonzero(py == sensors.VERTICAL).flatten()) else 0
        assert any(torch.equal(x[i, door], px[j, 0]) for j in torch.nonzero(py == y[i]).flatten())
    with pytest.raises(ValueError, match="split='val'"):
        sensors.load("val")
    with pytest.raises(ValueError, match="sensors=3"):
        grouped.GroupedConfig(sensors=3).validate()


def _sparse_masks():
    """Block 0: channel 1 of group 2 reaches groups 0 and 1 (crosses to device 0 of 2); block 1:
    only transfers inside devices (no exchange at all on 2 devices)."""
    m0 = torch.zeros(4, 4, 8, dtype=torch.bool)
    m0[2, 0, 1] = m0[2, 1, 1] = m0[3, 0, 5] = True
    m1 = torch.zeros(4, 4, 8, dtype=torch.bool)
    m1[0, 1, 3] = m1[3, 2, 0] = True
    return [m0, m1]


@pytest.mark.parametrize("world_size", [1, 2, 4])
def test_sensor_split_equals_one_process_and_the_closed_form(sensor_net, world_size):
    x = sensors.load("test")[0][:12]
    model = masks.apply(sensor_net, sensors.load("train")[0][:64], _sparse_masks())
    result = edge.run_edge(model, x, world_size=world_size, batch=6)
    assert torch.allclose(result.logits, model(x).detach(), rtol=1e-4, atol=1e-5)
    predicted = cost.edge_bytes(CFG, model.masks, world_size, 6)
    assert result.bytes_per_rank(0) == [sum(p.values()) for p in predicted]
    phases = {r["phase"] for r in result.ledger if r["request"] == 0}
    rounds = cost.edge_rounds(CFG, world_size, model.masks)
    if world_size == 2:  # block 1 crosses no device: no exchange, one round fewer
        assert phases == {"block 0", "head"} and rounds == 2
        assert sum(p["block 0"] for p in predicted) == 2 * 8 * 8 * 6 * 4  # 2 channels to device 0
    assert rounds == (0 if world_size == 1 else (world_size - 1) * len(phases - {"head"}) + 1)


def test_relaxed_link_time_is_the_closed_form_at_hard_gates(sensor_net):
    link = edge.EDGE_LINKS["Bluetooth"]
    for world_size in (2, 4):
        gates = edge_search.Gates(sensor_net, world_size)
        g = torch.Generator().manual_seed(0)
        with torch.no_grad():
            for t in gates.logits:
                t.copy_(torch.where(torch.rand(t.shape, generator=g) < 0.1, 50.0, -50.0))
        found = gates.masks()
        assert all(m[torch.arange(4), torch.arange(4)].all() for m in found)
        expected = gates.expected_seconds(link).item()
        assert expected == pytest.approx(cost.edge_comm_seconds(CFG, found, world_size, 1, link),
                                         rel=1e-6)
        with torch.no_grad():
            for t in gates.logits:
                t.fill_(-50.0)
        assert gates.expected_seconds(link).item() == pytest.approx(
            link.latency_s + 10 * 4 / link.bandwidth_Bps)  # the head alone: one round
    full = edge_search.Gates(sensor_net, 2)
    assert [m.all().item() for m in full.masks()] == [True, True]
    assert cost.transfer_bytes(CFG) == [8 * 8 * 4, 4 * 4 * 4]


def test_a_slower_link_keeps_fewer_transfers(sensor_net):
    x, y = sensors.load("train")
    kept = {}
    for name in ("loopback", "Wi-Fi", "Bluetooth"):
        found, _ = edge_search.search(sensor_net, x, y, 2, edge.resolve_link(name), price=0.005,
                                      steps=40, batch=32)  # a briefly trained net: a low price
        kept[name] = sum(len(c) for m in found for row in masks.send_channels(m, 2) for c in row)
    # a free link prices nothing: only the cross-entropy moves its gates
    assert kept["Bluetooth"] < kept["Wi-Fi"] <= kept["loopback"], kept
    with pytest.raises(ValueError, match="price=-1"):
        edge_search.search(sensor_net, x, y, 2, None, price=-1)
    with pytest.raises(ValueError, match="world_size=3"):
        edge_search.search(sensor_net, x, y, 3, None, price=0.1)
    with pytest.raises(ValueError, match="link='Wi-Fi'"):
        edge_search.search(sensor_net, x, y, 2, "Wi-Fi", price=0.1)
