"""Learned row vectors under data-parallel training: the dense all-reduce, the sparse exchange and the
tiered one (FEC) take the same steps on 2 gloo processes, bit for bit; the sparse ones send fewer bytes."""

import pytest
import torch

from fourdb.contracts import RowEmbeddings
from fourdb.engine.distribution import embedding_sync
from fourdb.engine.distribution.ddp import free_port
from fourdb.engine.distribution.embedding_sync import EmbeddingSync, embedding_tables, hot_threshold

STEPS = embedding_sync.PROFILE_STEPS + 5  # past the profile: the tiered sync has chosen its hot tier


class Table(torch.nn.Module):
    """What ``fourdb.models.id_embeddings.IdEmbeddings`` is to the sync, without the models' imports (the
    ranks start in seconds)."""

    def __init__(self, rows: int, dim: int):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(rows, dim))
        self.reads = None

    def forward(self, rows):
        if self.reads is not None and self.training:
            self.reads.append(rows.reshape(-1))
        return sum(self.weight[r] for r in rows)


class Toy(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.ids = Table(206, 8)  # 200 destinations and an unseen one, 5 parents
        self.out = torch.nn.Linear(8, 1)

    def forward(self, rows):
        return self.out(torch.relu(self.ids(rows))).pow(2).mean()


def batch(rank: int, step: int) -> torch.Tensor:
    """A rank's rows for a step: row 0 always (popular), a few random ones, and their parents."""
    g = torch.Generator().manual_seed(1000 * step + rank)
    own = torch.cat([torch.zeros(1, dtype=torch.int64), torch.randint(0, 200, (12,), generator=g)])
    return torch.stack([own, 201 + own % 5])


def train(rank: int, world: int, mode: str) -> tuple[dict, dict]:
    from fourdb.engine.distribution import ddp

    torch.manual_seed(rank)  # the ranks start apart: the sync makes them equal, as DDP does
    module = Toy()
    sync = EmbeddingSync(embedding_tables(module), mode, "auto", world)
    net = ddp.wrap(module, torch.device("cpu"), sync.ignored(module))
    opt = torch.optim.AdamW(module.parameters(), lr=0.01)
    for step in range(STEPS):
        opt.zero_grad()
        loss = net(batch(rank, step))
        sync.after_forward()
        loss.backward()
        sync.after_backward()
        opt.step()
    return {k: v.detach().clone() for k, v in module.state_dict().items()}, sync.report()


def worker(rank: int, world: int, folder: str, port: int) -> None:
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    out = {mode: train(rank, world, mode) for mode in embedding_sync.MODES}
    torch.save(out, f"{folder}/rank{rank}.pt")
    dist.barrier()
    dist.destroy_process_group()


@pytest.fixture(scope="module")
def synced(tmp_path_factory):
    import torch.multiprocessing as mp

    folder = tmp_path_factory.mktemp("sync")
    mp.spawn(worker, args=(2, str(folder), free_port()), nprocs=2, join=True)
    return [torch.load(folder / f"rank{r}.pt") for r in range(2)]


def test_the_three_syncs_take_the_same_steps(synced):
    dense = synced[0]["dense"][0]
    for rank in synced:
        for mode in embedding_sync.MODES:
            params = rank[mode][0]
            assert params.keys() == dense.keys()
            for name in dense:
                assert torch.equal(params[name], dense[name]), (mode, name)


def test_the_sparse_syncs_send_fewer_bytes_and_the_hot_tier_holds_the_popular_rows(synced):
    reports = {mode: synced[0][mode][1] for mode in embedding_sync.MODES}
    assert reports["dense"]["hot_rows"] == 0 and reports["sparse"]["hot_rows"] == 0
    # row 0 is read by both ranks every step, parents nearly so: a dense all-reduce is cheaper for them
    assert 1 <= reports["tiered"]["hot_rows"] <= 6
    assert reports["dense"]["bytes_per_step"] == reports["dense"]["dense_bytes_per_step"]
    for mode in ("sparse", "tiered"):
        assert reports[mode]["bytes_per_step"] < reports["dense"]["bytes_per_step"] / 4, reports[mode]
    assert reports["tiered"]["cold_rows_per_step"] < reports["sparse"]["cold_rows_per_step"]


def test_id_embeddings_tell_the_sync_which_rows_a_training_step_read():
    from fourdb.models.id_embeddings import IdEmbeddings

    ids = IdEmbeddings([4, 3], 2)
    assert isinstance(ids, RowEmbeddings) and ids.reads is None  # kept only when a sync asks
    rows = torch.tensor([[0, 2], [5, 6]])
    ids(rows)
    ids.reads = []
    ids.eval()
    ids(rows)  # evaluation reads count for nothing
    ids.train()
    out = ids(rows)
    assert [r.tolist() for r in ids.reads] == [[0, 2, 5, 6]]
    assert torch.equal(out, ids.weight[[0, 2]] + ids.weight[[5, 6]])


def test_a_row_is_hot_when_a_dense_all_reduce_sends_fewer_bytes_for_it():
    # 2 ranks: a row's all-reduce sends its vector once; sparse, each rank reading it sends vector + index
    assert hot_threshold(256, 2) == pytest.approx(256 / 264)
    assert hot_threshold(256, 8) == pytest.approx(2 * 7 / 8 * 256 / (7 * 264))  # more ranks: more rows are hot


def test_a_mistyped_sync_is_one_line_before_any_data_is_read():
    from fourdb.errors import SettingError
    from fourdb.train.trainer import TrainerConfig

    with pytest.raises(SettingError, match="did you mean 'tiered'"):
        TrainerConfig(embedding_sync="tierd")
    with pytest.raises(SettingError, match="embedding_hot_rows"):
        TrainerConfig(embedding_sync="tiered", embedding_hot_rows="many")
