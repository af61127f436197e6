"""The entity-relationship diagram of a database, written as SVG and PNG.

A box per table with its primary key, foreign keys and time (its column, the parents it inherits its
time from, or static), and an arrow per foreign key from the table that holds it to the table it
references, labelled with the key's name. Tables are placed by a force-directed layout of the foreign-key
graph (networkx's Kamada-Kawai), so a database of any shape is drawn without placing boxes by hand.
"""
from __future__ import annotations

import io
from pathlib import Path

from fourdb.rdb.database import Database
from fourdb.rdb.schema import Schema, Table
from fourdb.utils import atomic_write_bytes

BOX = dict(boxstyle="round,pad=0.5", fc="#eef3fb", ec="#4c72b0")
ARROW = "#c44e52"
GAP = 0.5  # inches between boxes, room for an arrow and its label
FONT = 8
TITLE = 0.6  # inches above the drawing


def schema_graph(schema: Schema):
    """The foreign keys as a networkx multigraph: a node per table, an edge per foreign key (child ->
    parent, ``key``: the key's column)."""
    import networkx as nx

    g = nx.MultiDiGraph()
    g.add_nodes_from(schema.table_names)
    for t in schema.tables:
        for fk in t.foreign_keys:
            g.add_edge(t.name, fk.link_table, key=fk.name)
    return g


def plain(text: str) -> str:
    """A name as matplotlib draws it literally: ``$`` would start mathematical notation (TeX, parsed)."""
    return str(text).replace("$", r"\$")


def box_text(t: Table) -> str:
    lines = [t.name]
    if t.primary_key:
        lines.append(f"PK {t.primary_key}")
    lines += [f"FK {fk.name} -> {fk.link_table}" for fk in t.foreign_keys]
    lines.append(f"time: {Database.time_label(t)}")
    return "\n".join(lines)


def layout(schema: Schema) -> tuple[dict[str, tuple[float, float]], tuple[float, float]]:
    """Table positions in [0, 1] x [0, 1] and a figure size in inches at which no two boxes overlap.

    networkx's Kamada-Kawai layout of the foreign-key graph places tables that share keys near each
    other and the others apart; the picture is then made just large enough for every box.
    """
    import networkx as nx
    import numpy as np

    g = nx.Graph(schema_graph(schema).to_undirected())
    names = list(g.nodes)
    sizes = np.array([box_size(schema.table(t)) for t in names]) + GAP
    if len(names) == 1:
        return {names[0]: (0.5, 0.5)}, (max(4.0, sizes[0][0] * 2), max(3.0, sizes[0][1] * 2))
    pos = nx.kamada_kawai_layout(g) if len(names) > 2 else nx.circular_layout(g)
    xy = np.array([pos[t] for t in names])
    xy = (xy - xy.min(0)) / np.maximum(xy.max(0) - xy.min(0), 1e-9)  # [0, 1] x [0, 1]
    # the smallest scale (inches per unit) at which every pair of boxes is apart along x or along y
    i, j = np.triu_indices(len(names), 1)
    need = (sizes[i] + sizes[j]) / 2
    apart = np.abs(xy[i] - xy[j])
    with np.errstate(divide="ignore"):
        scale = np.max(np.min(np.where(apart > 0, need / apart, np.inf), axis=1))
    span = scale * np.ones(2) if np.isfinite(scale) else sizes.sum(0)
    size = span + sizes.max(0)  # half a box of margin on every side
    frac = (sizes.max(0) / 2 + xy * span) / size
    return {t: (float(x), float(y)) for t, (x, y) in zip(names, frac)}, (float(size[0]), float(size[1]) + TITLE)


def box_size(t: Table) -> tuple[float, float]:
    """Width and height in inches of a table's box (monospace text: every character is 0.6 em wide)."""
    lines = box_text(t).splitlines()
    em = FONT / 72
    return 0.6 * em * max(map(len, lines)) + em, 1.2 * em * len(lines) + em


def draw_schema(schema: Schema, ax=None):
    """The diagram on a matplotlib axis (by default a new figure of the size ``layout`` asks); returns the figure."""
    import matplotlib.pyplot as plt

    pos, size = layout(schema)
    if ax is None:
        fig, ax = plt.subplots(figsize=size)
        fig.subplots_adjust(left=0, right=1, bottom=0, top=1 - TITLE / size[1])  # the layout spans the whole axis

    def draw_boxes(zorder):
        return {t.name: ax.text(*pos[t.name], plain(box_text(t)), ha="center", va="center", multialignment="left",
                                family="monospace", fontsize=FONT, bbox=BOX, zorder=zorder) for t in schema.tables}

    # Every box twice: the copy under the arrows places the outlines they are cut at (a box is placed only
    # when drawn), the copy over them hides an arrow that passes behind a box
    boxes = draw_boxes(1)
    draw_boxes(3)
    for t in schema.tables:
        keys = [fk for fk in t.foreign_keys if fk.link_table != t.name]  # a key to its own table: listed in its box
        for fk in keys:
            twins = [other.name for other in keys if other.link_table == fk.link_table]
            k = twins.index(fk.name)
            rad = 0.25 * ((k + 1) // 2) * (1 if k % 2 else -1)  # keys to one parent: arcs to either side
            src, dst = boxes[t.name], boxes[fk.link_table]
            ax.annotate("", xy=(0.5, 0.5), xycoords=dst, xytext=(0.5, 0.5), textcoords=src, zorder=2,
                        arrowprops=dict(arrowstyle="-|>", color=ARROW, lw=1.4, mutation_scale=14,
                                        connectionstyle=f"arc3,rad={rad}", patchA=src.get_bbox_patch(),
                                        patchB=dst.get_bbox_patch()))
            if len(twins) > 1:  # the box says which key points where, unless two point to one table
                (x0, y0), (x1, y1) = pos[t.name], pos[fk.link_table]
                # the middle of an arc3 curve lies half its bend off the chord's middle
                ax.text((x0 + x1) / 2 + rad * (y1 - y0) / 2, (y0 + y1) / 2 - rad * (x1 - x0) / 2, plain(fk.name),
                        color=ARROW, fontsize=FONT, ha="center", va="center", zorder=4,
                        bbox=dict(fc="white", ec="none", alpha=0.8))
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.axis("off")
    ax.set_title(f"{plain(schema.name)}: {len(schema.tables)} tables; an arrow points from a foreign key to the table it "
                 f"references")
    return ax.figure


def write_diagram(schema: Schema, stem: str | Path) -> list[Path]:
    """``stem``.svg and ``stem``.png; the SVG keeps its text as text (searchable, and readable by a test)."""
    import matplotlib
    import matplotlib.pyplot as plt

    stem = Path(stem)
    fig = draw_schema(schema)
    out = []
    try:
        with matplotlib.rc_context({"svg.fonttype": "none"}):
            for fmt in ("svg", "png"):
                buf = io.BytesIO()
                fig.savefig(buf, format=fmt, bbox_inches="tight", dpi=150)
                path = stem.with_name(f"{stem.name}.{fmt}")
                atomic_write_bytes(path, buf.getvalue())
                out.append(path)
    finally:
        plt.close(fig)
    return out
