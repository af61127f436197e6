"""Offline sampled-batch store with a two-tier feature cache (the DiskGNN idea).

The training batches of ``epochs`` epochs are sampled once and written to memory-mapped ``.npy`` files
under ``cache_root()/store/<key>``, where the key hashes everything that fixes them: the graph's
content (edges, times, features), the seeds, cutoffs, labels and hidden edge types of the task, the
sampler config, the batch size, the number of epochs, the hot-tier size and the state of the
trainer's random generator (so the seed). Training then replays them: the same batches, bit for bit,
as online sampling from the same generator, with no sampling and no random feature reads. A sweep
over models with the same seed reuses one store.

Per epoch the files hold each batch's blocks (edge lists with the sampled edges' ids per edge type and
layer, node counts per type), its input nodes with their cutoffs and relative-time features, and its
cold feature rows packed contiguously in batch order. Feature rows are ranked by how often the offline
pass read them; the most read ones, up to ``cache_mb``, form the hot tier, loaded whole into fast
memory (the GPU when training runs there, else RAM); the others stay memory-mapped, packed per batch
so an epoch reads them sequentially. Edge features (r2ne link rows) are read on replay from the graph
in RAM by the stored edge ids and cutoffs, by the same function as online sampling.

``manifest.json`` (written last, atomically, after the data files) lists every file with its size and
sha256. Opening a store checks the manifest's key and version and every checksum: a missing, corrupt
or stale file is reported and the store rebuilt, never used.
"""
from __future__ import annotations

import copy
import hashlib
import json
import logging
import shutil
import time
from pathlib import Path

import dgl
import numpy as np
import torch
from filelock import FileLock

from fourdb.engine.sampling.blocks import make_block
from fourdb.engine.sampling.data import add_edge_features, input_rows, node_names, relative_time, row_features
from fourdb.engine.feeding.pipeline import prefetch
from fourdb.engine.planning.timing import row_bytes
from fourdb.utils import atomic_output, atomic_write_text, cache_root, progress, stable_hash

STORE_VERSION = 4  # 2: edge ids in the edge lists, input cutoffs; 3: ns times, relative time per type; 4: input node ids
log = logging.getLogger("fourdb")


class StoreError(Exception):
    """A store on disk that must not be used (missing, corrupt or stale)."""


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 23), b""):
            h.update(chunk)
    return h.hexdigest()


def rng_state_hash(rng: np.random.Generator) -> str:
    return stable_hash(rng.bit_generator.state)


class _Layout:
    """Fixed order of node and edge types, so a batch is a row of integers."""

    def __init__(self, sampler):
        graph = sampler.graph
        self.ntypes = list(graph.ntypes)
        self.etypes = list(graph.canonical_etypes)
        self.id_etypes = sampler.id_etypes  # the edge types whose blocks carry edge ids
        self.L = len(sampler.fanouts)
        # edge lists are rows (local src, local dst, edge id or 0 where no ids): int32 unless more edges
        most = max((graph.g.num_edges(et) for et in self.etypes), default=0)
        self.dtype = np.int32 if most < 2 ** 31 else np.int64
        self.n_et, self.n_nt = len(self.etypes), len(self.ntypes)
        # per layer: edge counts per etype, num_src per ntype, num_dst per ntype; then input-type presence
        self.width = self.L * (self.n_et + 2 * self.n_nt) + self.n_nt

    def pack(self, batch, idx) -> tuple[np.ndarray, np.ndarray]:
        meta = np.zeros(self.width, np.int64)
        edges = []
        for l, block in enumerate(batch.blocks):
            base = l * (self.n_et + 2 * self.n_nt)
            for i, et in enumerate(self.etypes):
                s, d = block.edges(etype=et)
                meta[base + i] = len(s)
                ids = block.edges[et].data[dgl.EID] if et in self.id_etypes else torch.zeros_like(s)
                edges.append(np.stack([x.cpu().numpy() for x in (s, d, ids)]).astype(self.dtype))
            for i, t in enumerate(self.ntypes):
                meta[base + self.n_et + i] = block.num_src_nodes(t)
                meta[base + self.n_et + self.n_nt + i] = block.num_dst_nodes(t)
        for i, t in enumerate(self.ntypes):
            meta[self.L * (self.n_et + 2 * self.n_nt) + i] = int(t in batch.input_nodes)
        return meta, np.concatenate(edges, 1) if edges else np.zeros((3, 0), self.dtype)

    def counts(self, meta: np.ndarray, l: int):
        base = l * (self.n_et + 2 * self.n_nt)
        return (meta[base:base + self.n_et], meta[base + self.n_et:base + self.n_et + self.n_nt],
                meta[base + self.n_et + self.n_nt:base + self.n_et + 2 * self.n_nt])

    def blocks(self, meta: np.ndarray, edges: np.ndarray) -> list:
        """The DGL blocks of a packed batch (``pack``'s meta row and edge array)."""
        edges = torch.from_numpy(np.asarray(edges).astype(np.int64))
        out, pos = [], 0
        for l in range(self.L):
            counts, num_src, num_dst = self.counts(meta, l)
            rel, eids = {}, {}
            for i, et in enumerate(self.etypes):
                c = int(counts[i])
                rel[et] = (edges[0, pos:pos + c], edges[1, pos:pos + c])
                if et in self.id_etypes:
                    eids[et] = edges[2, pos:pos + c]
                pos += c
            out.append(make_block(rel, dict(zip(self.ntypes, num_src.tolist())),
                                  dict(zip(self.ntypes, num_dst.tolist())), eids=eids))
        return out

    def present(self, meta: np.ndarray) -> np.ndarray:
        return meta[self.L * (self.n_et + 2 * self.n_nt):].astype(bool)


def store_key(source, rng, epochs: int, hot_rows: int) -> str:
    shard = [(source.rank, source.world)] if source.world > 1 else []  # a data-parallel rank's own
    return stable_hash(source.data.fingerprint(), source.sampler.config(), source.batch_size, epochs, hot_rows,
                       rng_state_hash(rng), STORE_VERSION, *shard, length=24)


def hot_budget_rows(source, cache_mb: float) -> int:
    """How many feature rows the hot tier holds: the budget over the mean row size."""
    return int(cache_mb * 2 ** 20 // max(1.0, row_bytes(source.data.graph.features)))


class BatchStore:
    def __init__(self, folder: Path, manifest: dict, tier_device="cpu"):
        self.folder, self.manifest = folder, manifest
        self.layout = None
        self.states = manifest["rng_states"]
        self.epochs = manifest["epochs"]
        self.last = None
        self.tier_device = torch.device(tier_device)
        self._epochs: dict[int, dict] = {}
        self._hot = {}

    # ------------------------------------------------------------------ build and open
    @classmethod
    def open_or_build(cls, source, rng, epochs: int, cache_mb: float, root: Path | None = None) -> "BatchStore":
        hot_rows = hot_budget_rows(source, cache_mb)
        key = store_key(source, rng, epochs, hot_rows)
        root = Path(root or cache_root() / "store")
        folder = root / key
        root.mkdir(parents=True, exist_ok=True)
        tier = source.device if source.device is not None and torch.device(source.device).type == "cuda" else "cpu"
        with FileLock(str(folder) + ".lock"):
            try:
                store = cls.open(folder, key, tier)
                log.info("engine: using stored batches %s", folder)
            except StoreError as err:
                if folder.exists():
                    log.warning("engine: store %s is unusable (%s); rebuilding it", folder, err)
                    shutil.rmtree(folder, ignore_errors=True)
                start = time.perf_counter()
                build(source, rng, epochs, hot_rows, folder, key)
                log.info("engine: sampled %d epochs into %s in %.1f s", epochs, folder, time.perf_counter() - start)
                store = cls.open(folder, key, tier)
        store.layout = _Layout(source.sampler)
        return store

    @classmethod
    def open(cls, folder: Path, key: str, tier_device="cpu") -> "BatchStore":
        path = folder / "manifest.json"
        if not path.exists():
            raise StoreError("no manifest")
        try:
            manifest = json.loads(path.read_text())
        except (OSError, ValueError) as err:
            raise StoreError(f"unreadable manifest: {err}") from None
        if manifest.get("version") != STORE_VERSION or manifest.get("key") != key:
            raise StoreError(f"stale: manifest is for key {manifest.get('key')} version {manifest.get('version')}")
        for name, info in manifest["files"].items():
            f = folder / name
            if not f.exists():
                raise StoreError(f"missing file {name}")
            if f.stat().st_size != info["bytes"] or _sha256(f) != info["sha256"]:
                raise StoreError(f"checksum mismatch in {name}")
        return cls(folder, manifest, tier_device)

    # ------------------------------------------------------------------ replay
    def accepts(self, rng) -> bool:
        return rng_state_hash(rng) in self.states or self.last is not None

    def _load(self, name: str, mmap: bool = True) -> np.ndarray:
        return np.load(self.folder / name, mmap_mode="r" if mmap else None)

    def _epoch(self, k: int) -> dict:
        if k not in self._epochs:
            lay = self.layout
            meta = self._load(f"e{k}.meta.npy", mmap=False)
            ecount = meta[:, [l * (lay.n_et + 2 * lay.n_nt) + i for l in range(lay.L) for i in range(lay.n_et)]].sum(1)
            rcount = meta[:, lay.n_et:lay.n_et + lay.n_nt]  # inputs: layer 0 sources
            slot = self._load(f"e{k}.slot.npy")
            cold = np.zeros((len(meta), lay.n_nt), np.int64)
            row_off = np.concatenate([[0], np.cumsum(rcount.sum(1))])
            for b in range(len(meta)):
                s = np.asarray(slot[row_off[b]:row_off[b + 1]])
                cuts = np.concatenate([[0], np.cumsum(rcount[b])])
                cold[b] = [(s[cuts[i]:cuts[i + 1]] < 0).sum() for i in range(lay.n_nt)]
            self._epochs[k] = {
                "meta": meta, "edges": self._load(f"e{k}.edges.npy"), "slot": slot,
                "rel": [self._load(f"e{k}.rel{i}.npy") for i in range(lay.n_nt)],  # per type: widths differ
                "type_off": np.concatenate([np.zeros((1, lay.n_nt), np.int64), np.cumsum(rcount, 0)]),
                "cut": self._load(f"e{k}.cut.npy"),
                "nid": self._load(f"e{k}.nid.npy"),
                "idx": self._load(f"e{k}.idx.npy"),
                "edge_off": np.concatenate([[0], np.cumsum(ecount)]), "row_off": row_off,
                "seed_off": np.concatenate([[0], np.cumsum(meta[:, self._seed_col()])]),
                "cold_off": np.concatenate([np.zeros((1, lay.n_nt), np.int64), np.cumsum(cold, 0)]),
                "cold": [(self._load(f"e{k}.cold{i}.num.npy"), self._load(f"e{k}.cold{i}.cat.npy"))
                         for i in range(lay.n_nt)],
            }
        return self._epochs[k]

    def _seed_col(self) -> int:
        lay = self.layout
        l = lay.L - 1
        return l * (lay.n_et + 2 * lay.n_nt) + lay.n_et + lay.n_nt + lay.ntypes.index(self.manifest["seed_type"])

    def _hot_tier(self, i: int):
        """Hot rows of table i: numpy arrays in RAM, or tensors on the GPU when training runs there."""
        if i not in self._hot:
            num, cat = self._load(f"hot{i}.num.npy", mmap=False), self._load(f"hot{i}.cat.npy", mmap=False)
            if self.tier_device.type != "cpu":
                num, cat = torch.from_numpy(num).to(self.tier_device), torch.from_numpy(cat).to(self.tier_device)
            self._hot[i] = (num, cat)
        return self._hot[i]

    def load_batch(self, k: int, b: int, data):
        lay, e = self.layout, self._epoch(k)
        meta = e["meta"][b]
        blocks = lay.blocks(meta, e["edges"][:, e["edge_off"][b]:e["edge_off"][b + 1]])
        _, n_in, _ = lay.counts(meta, 0)
        present = lay.present(meta)
        feats, cutoffs, r = {}, {}, e["row_off"][b]
        for i, t in enumerate(lay.ntypes):
            n = int(n_in[i])
            if present[i]:
                cutoffs[t] = np.asarray(e["cut"][r:r + n])
                names = node_names(data, t, np.asarray(e["nid"][r:r + n]), cutoffs[t])
                slot = np.asarray(e["slot"][r:r + n])
                hot_num, hot_cat = self._hot_tier(i)
                c0, c1 = e["cold_off"][b, i], e["cold_off"][b + 1, i]
                cold_num, cold_cat = e["cold"][i][0][c0:c1], e["cold"][i][1][c0:c1]
                is_hot = slot >= 0
                rel = e["rel"][i][e["type_off"][b, i]:e["type_off"][b + 1, i]]
                if isinstance(hot_num, np.ndarray):  # RAM tier: one array per table, relative time beside
                    d = hot_num.shape[1]
                    num = np.empty((n, d + rel.shape[1]), dtype=hot_num.dtype)
                    cat = np.empty((n, hot_cat.shape[1]), dtype=hot_cat.dtype)
                    hs = slot[is_hot]
                    num[is_hot, :d], cat[is_hot] = hot_num[hs], hot_cat[hs]
                    num[~is_hot, :d], cat[~is_hot] = cold_num, cold_cat
                    num[:, d:] = rel
                    feats[t] = {"num": torch.from_numpy(num), "cat": torch.from_numpy(cat), **names}
                else:  # GPU tier: assembled on the GPU, only the cold rows travel
                    dev = hot_num.device
                    mask = torch.from_numpy(is_hot).to(dev)
                    num = torch.empty((n, hot_num.shape[1]), dtype=hot_num.dtype, device=dev)
                    cat = torch.empty((n, hot_cat.shape[1]), dtype=hot_cat.dtype, device=dev)
                    hs = torch.from_numpy(slot[is_hot].astype(np.int64)).to(dev)
                    num[mask], cat[mask] = hot_num[hs], hot_cat[hs]
                    num[~mask] = torch.from_numpy(np.array(cold_num)).to(dev)
                    cat[~mask] = torch.from_numpy(np.array(cold_cat)).to(dev)
                    rel_t = torch.from_numpy(np.array(rel)).to(dev)
                    feats[t] = {"num": torch.cat([num, rel_t], 1), "cat": cat, **names}
            r += n
        add_edge_features(data, blocks, cutoffs)
        idx = np.asarray(e["idx"][e["seed_off"][b]:e["seed_off"][b + 1]])
        return (blocks, feats), torch.as_tensor(data.labels["train"][idx])

    def epoch_batches(self, source, rng, workers: int, depth: int):
        h = rng_state_hash(rng)
        k = self.states.index(h) if h in self.states else (self.last + 1) % self.epochs
        source.epoch_plan(rng)  # keep the generator in step with online sampling
        self.last = k
        n = len(self._epoch(k)["meta"])
        return prefetch(((lambda b=b: self.load_batch(k, b, source.data)) for b in range(n)), workers, depth)


def replay_seconds(source, batches: list) -> float:
    """Median seconds to rebuild a batch from packed arrays, as ``load_batch`` does (timed in memory)."""
    lay = _Layout(source.sampler)
    data, times = source.data, []
    for batch in batches:
        meta, edges = lay.pack(batch, None)
        feats, cutoffs = {}, {t: c.cpu().numpy() for t, c in batch.input_cutoffs.items()}
        for t, nodes in batch.input_nodes.items():
            ids = nodes.cpu().numpy()
            rows = input_rows(data, t, ids, batch.num_seeds if t == data.seed_type else 0)
            num, cat = row_features(data, t, rows)
            feats[t] = (ids, num, cat, relative_time(data, t, rows, cutoffs[t]))
        start = time.perf_counter()
        add_edge_features(data, lay.blocks(meta, edges), cutoffs)
        for t, (ids, num, cat, rel_t) in feats.items():
            torch.cat([torch.from_numpy(np.array(num)), torch.from_numpy(np.array(rel_t))], 1)
            torch.from_numpy(np.array(cat))
            node_names(data, t, ids, cutoffs[t])
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def stored_mb(source, batch) -> tuple[float, float]:
    """Megabytes ``build`` writes for one sampled batch: (its blocks, seed ids and per-row index: slot,
    cutoff, node id and relative times; its packed feature rows, which a hot tier holding them spares)."""
    data, lay = source.data, _Layout(source.sampler)
    meta, edges = lay.pack(batch, None)
    index, features = meta.nbytes + edges.nbytes + 8 * batch.num_seeds, 0
    for t, nodes in batch.input_nodes.items():
        n, f = len(nodes), data.graph.features[t]
        width = relative_time(data, t, np.zeros(0, np.int64), np.zeros(0, np.int64)).shape[1]
        index += n * (3 * 8 + 4 * width)
        features += n * (f.numeric.shape[1] * f.numeric.itemsize + f.categorical.shape[1] * f.categorical.itemsize)
    return index / 2 ** 20, features / 2 ** 20


def build(source, rng, epochs: int, hot_rows: int, folder: Path, key: str) -> None:
    """Sample ``epochs`` epochs from a copy of ``rng`` and write them, manifest last, then rename."""
    data, rng = source.data, copy.deepcopy(rng)
    lay = _Layout(source.sampler)
    with atomic_output(folder, folder=True) as tmp:
        states, per_epoch = [], []
        counts = {t: np.zeros(len(data.graph.features[t].numeric) * (2 if t == data.seed_type else 1), np.int64)
                  for t in lay.ntypes}
        for k in range(epochs):
            states.append(rng_state_hash(rng))
            plan = source.epoch_plan(rng)
            jobs = ((lambda i=i, s=s: (i, source.sample("train", i, np.random.default_rng(s)))) for i, s in plan)
            metas, edges, idxs, rows, rels, cuts, nids = [], [], [], {t: [] for t in lay.ntypes}, {t: [] for t in lay.ntypes}, [], []
            sampled = prefetch(jobs, max(1, source.workers), source.engine.prefetch)
            desc = f"sampling epoch {k + 1}/{epochs} into the store"
            for idx, batch in progress(sampled, None, total=len(plan), desc=desc, leave=False):
                meta, e = lay.pack(batch, idx)
                metas.append(meta)
                edges.append(e)
                idxs.append(np.asarray(idx, np.int64))
                for t in lay.ntypes:
                    if t in batch.input_nodes:
                        ids = batch.input_nodes[t].cpu().numpy()
                        r = input_rows(data, t, ids, batch.num_seeds if t == data.seed_type else 0)
                        rows[t].append(r)
                        cuts.append(batch.input_cutoffs[t].cpu().numpy())
                        nids.append(ids.astype(np.int64))
                        rels[t].append(relative_time(data, t, r, cuts[-1]))
                        counts[t] += np.bincount(r, minlength=len(counts[t]))
                    else:
                        rows[t].append(np.zeros(0, np.int64))
            per_epoch.append((metas, edges, idxs, rows, rels, cuts, nids))
        # hot tier: the most read rows over all types, up to the budget
        flat = np.concatenate([counts[t] for t in lay.ntypes])
        owner = np.concatenate([np.full(len(counts[t]), i) for i, t in enumerate(lay.ntypes)])
        local = np.concatenate([np.arange(len(counts[t])) for t in lay.ntypes])
        order = np.argsort(-flat, kind="stable")
        order = order[flat[order] > 0][:hot_rows]
        hot = {t: np.sort(local[order][owner[order] == i]) for i, t in enumerate(lay.ntypes)}
        for i, t in enumerate(lay.ntypes):
            num, cat = row_features(data, t, hot[t])
            np.save(tmp / f"hot{i}.num.npy", num)
            np.save(tmp / f"hot{i}.cat.npy", cat)
        for k, (metas, edges, idxs, rows, rels, cuts, nids) in enumerate(per_epoch):
            np.save(tmp / f"e{k}.meta.npy", np.stack(metas))
            np.save(tmp / f"e{k}.edges.npy", np.concatenate(edges, 1))
            np.save(tmp / f"e{k}.idx.npy", np.concatenate(idxs))
            for i, t in enumerate(lay.ntypes):
                width = relative_time(data, t, np.zeros(0, np.int64), np.zeros(0, np.int64)).shape[1]
                np.save(tmp / f"e{k}.rel{i}.npy", np.concatenate(rels[t]) if rels[t] else np.zeros((0, width), np.float32))
            np.save(tmp / f"e{k}.cut.npy", np.concatenate(cuts) if cuts else np.zeros(0, np.int64))
            np.save(tmp / f"e{k}.nid.npy", np.concatenate(nids) if nids else np.zeros(0, np.int64))
            slots = []
            for b in range(len(metas)):
                for t in lay.ntypes:
                    r = rows[t][b]
                    pos = np.searchsorted(hot[t], r)
                    found = (pos < len(hot[t])) & (hot[t][np.minimum(pos, max(len(hot[t]) - 1, 0))] == r) \
                        if len(hot[t]) else np.zeros(len(r), bool)
                    slots.append(np.where(found, pos, -1))
            np.save(tmp / f"e{k}.slot.npy", np.concatenate(slots) if slots else np.zeros(0, np.int64))
            for i, t in enumerate(lay.ntypes):
                r = np.concatenate(rows[t]) if rows[t] else np.zeros(0, np.int64)
                if len(hot[t]):
                    pos = np.minimum(np.searchsorted(hot[t], r), len(hot[t]) - 1)
                    r = r[hot[t][pos] != r]
                num, cat = row_features(data, t, r)
                np.save(tmp / f"e{k}.cold{i}.num.npy", num)
                np.save(tmp / f"e{k}.cold{i}.cat.npy", cat)
        files = {p.name: {"bytes": p.stat().st_size, "sha256": _sha256(p)} for p in sorted(tmp.glob("*.npy"))}
        manifest = {"version": STORE_VERSION, "key": key, "epochs": epochs, "rng_states": states,
                    "seed_type": data.seed_type, "sampler": source.sampler.config(), "batch_size": source.batch_size,
                    "hot_rows": {t: int(len(hot[t])) for t in lay.ntypes}, "files": files}
        atomic_write_text(tmp / "manifest.json", json.dumps(manifest, indent=1))
