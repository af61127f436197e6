"""DGL's distributed path on one machine: partition a graph in two, serve each partition, and train
GraphSAGE data-parallel on the two partitions over loopback (127.0.0.1).

    DGLBACKEND=pytorch .venv/bin/python examples/dgl_distributed_loopback.py [--nodes 20000]

What it does, as DGL 2.1's launch tool would on two machines: ``dgl.distributed.partition_graph``
writes 2 partitions and their JSON config; one server process per partition (DGL_ROLE=server) serves
it; two trainer processes (DGL_ROLE=client, torch.distributed gloo) open the ``DistGraph``, split the
training nodes with ``node_split`` (each trainer gets the nodes of its partition), sample neighbours
through the servers with ``DistNodeDataLoader`` and train one epoch with DDP. The servers and ports are
local, so this is a functional check of the path, not a speed test. fourdb's own temporal graphs
(per-edge times, (row, cutoff) nodes) do not go through it: see README, "Beyond one machine's memory".

Outcome on one machine with 127.0.0.1 only (DGL 2.1.0, torch 2.2.1, CPU): partitioning, both servers
and both clients' connections work, and sampling through the servers does, but training does not:

* with the default OpenMP threads, SAGEConv on a sampled block aborts in DGL's COOToCSR:
  ``spmat_op_impl_coo.cc:611: Check failed: thread_prefixsum[num_threads] == NNZ (4757 vs. 6563)``;
* with ``OMP_NUM_THREADS=1``, pulling features fails:
  ``rpc.cc:395: Check failed: l_id < local_data_shape[0] (18446744073709549107 vs. 2509)``, because DGL
  takes a trainer's machine (so its local partition) from the first ip_config line whose IP is one of
  the host's addresses: with both partitions on 127.0.0.1 every trainer is machine 0, and the rows of
  partition 1 are read as local rows of partition 0. Two partitions need two hosts (distinct IPs).
"""
from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("DGLBACKEND", "pytorch")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def partition(folder: Path, nodes: int) -> Path:
    import dgl
    import torch

    g = dgl.rand_graph(nodes, nodes * 10, seed=0) if "seed" in dgl.rand_graph.__code__.co_varnames else dgl.rand_graph(nodes, nodes * 10)
    torch.manual_seed(0)
    g.ndata["feat"] = torch.randn(nodes, 16)
    g.ndata["label"] = (g.ndata["feat"][:, 0] > 0).long()
    g.ndata["train_mask"] = torch.rand(nodes) < 0.5
    dgl.distributed.partition_graph(g, "demo", 2, str(folder), part_method="random")
    return folder / "demo.json"


def server(i: int, ip_config: str, part_config: str) -> None:
    import dgl

    os.environ.update(DGL_ROLE="server", DGL_SERVER_ID=str(i), DGL_IP_CONFIG=ip_config, DGL_NUM_SERVER="1",
                      DGL_NUM_CLIENT="2", DGL_CONF_PATH=part_config, DGL_GRAPH_FORMAT="csc", DGL_KEEP_ALIVE="0")
    dgl.distributed.initialize(ip_config)


def trainer(rank: int, ip_config: str, part_config: str, master_port: int) -> None:
    import dgl
    import torch
    import torch.nn.functional as F
    from dgl.nn import SAGEConv

    os.environ.update(DGL_ROLE="client", DGL_DIST_MODE="distributed", DGL_NUM_SAMPLER="0", DGL_IP_CONFIG=ip_config,
                      DGL_NUM_SERVER="1", DGL_GROUP_ID="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(master_port),
                      RANK=str(rank), WORLD_SIZE="2")
    dgl.distributed.initialize(ip_config)
    torch.distributed.init_process_group("gloo")
    g = dgl.distributed.DistGraph("demo", part_config=part_config)
    pb = g.get_partition_book()
    nids = dgl.distributed.node_split(g.ndata["train_mask"], pb, force_even=True)
    loader = dgl.dataloading.DistNodeDataLoader(g, nids, dgl.dataloading.NeighborSampler([5, 5]), batch_size=256,
                                                shuffle=True)

    class SAGE(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.l1, self.l2 = SAGEConv(16, 32, "mean"), SAGEConv(32, 2, "mean")

        def forward(self, blocks, x):
            return self.l2(blocks[1], F.relu(self.l1(blocks[0], x)))

    model = torch.nn.parallel.DistributedDataParallel(SAGE())
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    steps, correct, seen = 0, 0, 0
    for input_nodes, seeds, blocks in loader:
        x, y = g.ndata["feat"][input_nodes], g.ndata["label"][seeds]
        out = model(blocks, x)
        loss = F.cross_entropy(out, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        steps += 1
        correct += int((out.argmax(1) == y).sum())
        seen += len(y)
    print(f"trainer {rank}: partition {pb.partid}, {len(nids)} training nodes, {steps} steps, "
          f"train accuracy {correct / max(seen, 1):.3f}", flush=True)
    torch.distributed.barrier()
    dgl.distributed.exit_client()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=20000)
    ap.add_argument("--role", default=None)
    ap.add_argument("--index", type=int, default=0)
    ap.add_argument("--ip-config")
    ap.add_argument("--part-config")
    ap.add_argument("--master-port", type=int, default=0)
    args = ap.parse_args()
    if args.role == "server":
        server(args.index, args.ip_config, args.part_config)
        return 0
    if args.role == "trainer":
        trainer(args.index, args.ip_config, args.part_config, args.master_port)
        return 0
    folder = Path(tempfile.mkdtemp(prefix="fourdb-dgl-dist-"))
    part_config = partition(folder, args.nodes)
    print(f"partitioned {args.nodes} nodes into 2 parts: {part_config}", flush=True)
    ip_config = folder / "ip_config.txt"
    ip_config.write_text(f"127.0.0.1 {free_port()}\n127.0.0.1 {free_port()}\n")
    me = [sys.executable, __file__, "--ip-config", str(ip_config), "--part-config", str(part_config)]
    servers = [subprocess.Popen(me + ["--role", "server", "--index", str(i)]) for i in range(2)]
    time.sleep(3)
    port = free_port()
    trainers = [subprocess.Popen(me + ["--role", "trainer", "--index", str(r), "--master-port", str(port)])
                for r in range(2)]
    codes = []
    for p in trainers:
        try:
            codes.append(p.wait(timeout=300))
        except subprocess.TimeoutExpired:
            p.kill()
            codes.append("timeout")
    for p in servers:
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
    print(f"trainer exit codes: {codes}", flush=True)
    return 0 if codes == [0, 0] else 1


if __name__ == "__main__":
    sys.exit(main())
