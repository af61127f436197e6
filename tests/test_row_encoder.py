"""The row encoder setting (``model.params.row_encoder``, ``fourdb.models.encoders``): linear when not given,
exactly as every GNN encoded rows before the setting existed, or RelBench's per-table ResNet.

The GNNs here are every model of conf/model that reads a sampled graph and takes a binary task (as in
tests/test_models.py), relgt and musegnn included; the recommendation models run one of their
convolutions and take the setting through it.
"""
import json
import math

import pytest
import torch
from conftest import config

from fourdb.errors import SettingError
from fourdb.experiment.run import run_experiment
from fourdb.models import TaskInfo, create_model
from fourdb.models.encoders import (RESNET_LAYERS, ResidualBlock, ResNetRowEncoder, RowEncoder, RowEncoding,
                                    TypeEncoder, key)
from test_end_to_end import fourdb
from test_models import GNNS, graph_data, nodewise

BINARY = TaskInfo("binary", 2, "auroc")
DIMS = {"users": (3, [4, 2]), "items.x": (2, [])}  # a '.' in a name, and a table without category columns


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Small models on a shared machine: one intra-op thread (as tests/test_models.py)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def inputs() -> dict:
    num, cat = torch.linspace(-1, 1, 9).view(3, 3), torch.tensor([[0, 1], [3, 0], [2, 1]])
    return {"users": {"num": num, "cat": cat}, "items.x": {"num": num[:, :2], "cat": cat[:, :0]}}


def test_the_default_encoder_is_the_one_every_gnn_had():
    """Not given, the row encoder is built and computes as before the setting: these are the outputs of
    the module as it was (fourdb/models/encoders.py before row_encoder), at seed 0."""
    was = {"users": [[-1.524203, -0.107536, 0.96219, 1.624576], [0.153762, 1.722009, -0.193643, -2.397963],
                     [0.323953, 0.264233, 0.814791, 0.811752]],
           "items.x": [[0.464499, -1.52768, -0.842368, -0.527126], [0.210165, -0.661283, -0.560245, -0.483806],
                       [-0.04417, 0.205114, -0.278123, -0.440487]]}
    for made in (lambda: TypeEncoder(DIMS, 4), lambda: TypeEncoder(DIMS, 4, RowEncoding.of("test", {}))):
        torch.manual_seed(0)
        enc = made()
        assert all(isinstance(e, RowEncoder) for e in enc.encoders.values())
        out = enc(inputs())
        for t, values in was.items():
            assert torch.allclose(out[t], torch.tensor(values), atol=1e-5), (t, out[t])


@pytest.mark.parametrize("model", ["sage", "musegnn", "relgt"])
def test_row_encoder_linear_is_the_gnn_as_it_was(model):
    """Through the model: not given and ``row_encoder=linear`` build the same weights and the same
    outputs, bit for bit (so a board run's config, without the key, means what it meant)."""
    data = graph_data("r2ne")
    outs, weights = [], []
    for params in ({}, {"row_encoder": "linear"}):
        torch.manual_seed(0)
        module = create_model(model, BINARY, **params).build(data).eval()
        weights.append(module.state_dict())
        outs.append(nodewise(module, data, 40))
    assert weights[0].keys() == weights[1].keys()
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])
    assert torch.equal(outs[0], outs[1])


def test_resnet_is_one_network_per_table_of_the_asked_depth():
    """One ResNet per node type, none shared: the first block reads every column's vector side by side
    ((numbers + category columns) * hidden), the others ``hidden``, and each row comes out ``hidden`` wide."""
    torch.manual_seed(0)
    enc = TypeEncoder(DIMS, 8, RowEncoding("resnet", 3, 0.1))
    out = enc(inputs())
    assert {t: tuple(v.shape) for t, v in out.items()} == {"users": (3, 8), "items.x": (3, 8)}
    for t, (numbers, cards) in DIMS.items():
        net = enc.encoders[key(t)]
        assert isinstance(net, ResNetRowEncoder) and len(net.blocks) == 3
        assert all(isinstance(b, ResidualBlock) for b in net.blocks)
        assert net.blocks[0].body[0].in_features == (numbers + len(cards)) * 8
        assert all(b.body[0].in_features == 8 for b in net.blocks[1:])
    users, items = enc.encoders.values()
    assert not {id(p) for p in users.parameters()} & {id(p) for p in items.parameters()}
    assert RowEncoding.of("test", {"row_encoder": "resnet"}).layers == RESNET_LAYERS


def test_gradients_reach_every_weight_of_the_resnet():
    torch.manual_seed(0)
    enc = TypeEncoder(DIMS, 8, RowEncoding("resnet", 2, 0.1)).train()
    sum((v ** 2).sum() for v in enc(inputs()).values()).backward()
    for name, p in enc.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def test_a_rows_resnet_state_is_its_own():
    """LayerNorm, not BatchNorm: a row's state does not depend on the rows beside it (evaluation mode)."""
    torch.manual_seed(0)
    net = ResNetRowEncoder(3, [4, 2], 8, 2, 0.1).eval()
    x = inputs()["users"]
    together = net(x["num"], x["cat"])
    alone = torch.cat([net(x["num"][i:i + 1], x["cat"][i:i + 1]) for i in range(3)])
    assert torch.allclose(together, alone, atol=1e-6)


@pytest.mark.parametrize("model", GNNS)
def test_every_gnn_takes_the_resnet(model):
    """Each GNN builds a ResNet for every node table (link rows keep their linear encoders), and its seeds'
    outputs are finite and the same whatever batch they share."""
    data = graph_data("r2ne")
    torch.manual_seed(0)
    module = create_model(model, BINARY, row_encoder="resnet", row_encoder_layers=1).build(data).eval()
    assert set(data.graph.features) and all(
        isinstance(e, ResNetRowEncoder) and len(e.blocks) == 1 for e in module.encoder.encoders.values())
    edge_encoders = module.edge_encoders if isinstance(module.edge_encoders, TypeEncoder) else module.edge_encoders[0]
    assert all(isinstance(e, RowEncoder) for e in edge_encoders.encoders.values())
    forty, whole = nodewise(module, data, 40), nodewise(module, data, len(data.seeds["val"]))
    assert torch.isfinite(forty).all() and forty.std() > 1e-4
    assert torch.allclose(forty, whole, atol=1e-4), (forty - whole).abs().max()


@pytest.mark.parametrize("params,message", [
    ({"row_encoder": "resnt"}, "model 'sage': row_encoder must be one of linear, resnet, not 'resnt' "
                               "(did you mean 'resnet'?)"),
    ({"row_encoder_layers": 3}, "model 'sage': row_encoder_layers=3 needs row_encoder=resnet"),
    ({"row_encoder": "resnet", "row_encoder_layers": 0}, "model 'sage': row_encoder_layers must be a positive "
                                                          "integer, not 0"),
    ({"row_encoder": "resnet", "row_encoder_layer": 2}, "model 'sage' has no parameter 'row_encoder_layer' "
                                                         "(did you mean 'row_encoder_layers'?)"),
])
def test_a_bad_row_encoder_setting_is_one_line_when_the_model_is_made(params, message):
    """Refused by create_model, before any input is built (as a mistyped parameter is)."""
    with pytest.raises(SettingError) as err:
        create_model("sage", BINARY, **params)
    assert message in str(err.value) and "\n" not in str(err.value), str(err.value)


@pytest.mark.parametrize("model,task", [("relgt", BINARY), ("two_tower", TaskInfo("recommendation", 0, "map"))])
def test_the_error_names_the_model_that_was_asked_for(model, task):
    with pytest.raises(SettingError, match=f"^model '{model}': row_encoder must be one of linear, resnet"):
        create_model(model, task, row_encoder="mlp")
    assert create_model(model, task, row_encoder="resnet").params["row_encoder"] == "resnet"


TINY = ["dataset=synthetic", "dataset.params.size=150", "task=taste", "sampler.fanouts=[4,3]", "max_train_seeds=150",
        "max_val_seeds=60", "trainer.epochs=1", "trainer.progress=false", "+model.params.row_encoder=resnet"]


def check_record(record: dict, model: str) -> None:
    assert record["model"] == model and record["config"]["model"]["params"]["row_encoder"] == "resnet"
    assert all(math.isfinite(record["metrics"][s]["auroc"]) for s in ("val", "test")), record["metrics"]


def test_fourdb_run_with_the_resnet_writes_a_record(tmp_path):
    out = tmp_path / "run"
    p = fourdb("run", *TINY, "model=sage", f"hydra.run.dir={out}", cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-2000:]
    check_record(json.loads((out / "record.json").read_text()), "sage")


def test_a_relational_gcn_run_with_a_deeper_resnet(tmp_path):
    record = run_experiment(config(*TINY, "model=rgcn", "+model.params.row_encoder_layers=3"), tmp_path)
    check_record(record, "rgcn")
    assert record["config"]["model"]["params"]["row_encoder_layers"] == 3
