"""The entity-relationship diagram of a database, written as SVG and PNG.

A box per table with its primary key, foreign keys and time (its column, the parents it inherits its
time from, or static), and an arrow per foreign key from the table that holds it to the table it
references, labelled with the key's name. Tables are placed in layers, so a database of any shape is drawn
without placing boxes by hand: the tables nothing points to (facts, events) at the top, each table above
the tables it references, a layer's tables ordered by where their neighbours above stand, and a layer wider
than ``MAX_ROW_INCHES`` wrapped into rows. The picture grows with the tables' boxes, never with how they
are spread (a 24-table warehouse fits one screen-sized page), and the PNG's resolution is lowered where it
would be over ``MAX_PIXELS`` a side.
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
TITLE_FONT = 10


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


BOX_PAD = 0.5 * FONT / 72  # the box's outline lies this far (inches) outside its text
MAX_ROW_INCHES = 22.0  # a layer wider than this wraps into another row
ROW_GAP = 0.9  # inches between rows, room for arrows to turn
MAX_PIXELS = 4000  # the PNG's longest side at most
MAX_ARROWS = 40  # tables joined by keys, beyond which two tables get one arrow however many keys join them
DPI = 150


def title(schema: Schema) -> list[str]:
    return [f"{schema.name}: {len(schema.tables)} tables", "an arrow points from a foreign key to the table it references"]


def layers(schema: Schema) -> list[list[str]]:
    """Tables by layer, top first: a table's layer is the longest chain of foreign keys from it down to a table
    that references none (tables that reference each other share one); layers are ordered top-down."""
    import networkx as nx

    g = nx.DiGraph((u, v) for u, v, _ in schema_graph(schema).edges(keys=True) if u != v)
    g.add_nodes_from(schema.table_names)
    dag = nx.condensation(g)  # a cycle of references counts as one table
    height: dict[int, int] = {}
    for n in reversed(list(nx.topological_sort(dag))):
        height[n] = 1 + max((height[m] for m in dag.successors(n)), default=-1)
    member = dag.graph["mapping"]
    top = max(height.values(), default=0)
    out: list[list[str]] = [[] for _ in range(top + 1)]
    for t in schema.table_names:
        out[top - height[member[t]]].append(t)
    return [layer for layer in out if layer]


def layout(schema: Schema) -> tuple[dict[str, tuple[float, float]], tuple[float, float]]:
    """Table positions in [0, 1] x [0, 1] and a figure size in inches at which no two boxes overlap: the
    ``layers`` top-down, each in rows of at most ``MAX_ROW_INCHES``, a table placed near the mean position of
    the tables it is linked to in the rows above (fewer arrows cross)."""
    sizes = {t.name: box_size(t) for t in schema.tables}
    links = schema_graph(schema).to_undirected()
    placed: dict[str, tuple[float, float]] = {}  # table -> (x centre, row) in inches and rows
    rows: list[list[str]] = []
    for layer in layers(schema):
        def above(t: str) -> float:  # where its linked tables already placed stand (none: keep schema order)
            xs = [placed[n][0] for n in links.neighbors(t) if n in placed]
            return sum(xs) / len(xs) if xs else float("inf")

        layer = sorted(layer, key=above)
        row, width = [], 0.0
        for t in layer:
            if row and width + sizes[t][0] + GAP > MAX_ROW_INCHES:
                rows.append(row)
                row, width = [], 0.0
            row.append(t)
            placed[t] = (width + sizes[t][0] / 2, len(rows))
            width += sizes[t][0] + GAP
        rows.append(row)
    widths = [sum(sizes[t][0] + GAP for t in row) - GAP for row in rows]
    heights = [max(sizes[t][1] for t in row) for row in rows]
    span_x = max(widths)
    span_y = sum(heights) + ROW_GAP * (len(rows) - 1)
    heading = 0.6 * TITLE_FONT / 72 * max(map(len, title(schema)))  # the title is never cut
    size = (max(span_x, heading) + 2 * GAP, span_y + 2 * GAP)
    span_x = size[0] - 2 * GAP
    pos, y = {}, GAP
    for row, w, h in zip(rows, widths, heights):
        shift = (span_x - w) / 2  # each row centred
        for t in row:
            pos[t] = ((GAP + shift + placed[t][0]) / size[0], 1 - (y + BOX_PAD) / size[1])  # the box's top
        y += h + ROW_GAP
    return pos, (float(size[0]), float(size[1]) + TITLE)


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

    def draw_boxes(zorder):  # a row's boxes hang from its top
        return {t.name: ax.text(*pos[t.name], plain(box_text(t)), ha="center", va="top", multialignment="left",
                                family="monospace", fontsize=FONT, bbox=BOX, zorder=zorder) for t in schema.tables}

    # Every box twice: the copy under the arrows places the outlines they are cut at (a box is placed only
    # when drawn), the copy over them hides an arrow that passes behind a box
    boxes = draw_boxes(1)
    draw_boxes(3)
    # a key to its own table is listed in its box; on a crowded schema one arrow joins two tables however
    # many keys link them (the boxes name every key), so that arrows stay few enough to follow
    links = [(t, [fk for fk in t.foreign_keys if fk.link_table != t.name]) for t in schema.tables]
    crowded = sum(len({fk.link_table for fk in keys}) for _, keys in links) > MAX_ARROWS
    for t, keys in links:
        if crowded:
            keys = list({fk.link_table: fk for fk in keys}.values())
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
    ax.set_title("\n".join(map(plain, title(schema))), fontsize=TITLE_FONT)
    return ax.figure


def write_diagram(schema: Schema, stem: str | Path) -> list[Path]:
    """``stem``.svg and ``stem``.png; the SVG keeps its text as text (searchable, and readable by a test)."""
    import matplotlib
    import matplotlib.pyplot as plt

    stem = Path(stem)
    fig = draw_schema(schema)
    dpi = min(DPI, MAX_PIXELS / max(fig.get_size_inches()))  # a wide schema: a smaller PNG, never a huge one
    out = []
    try:
        with matplotlib.rc_context({"svg.fonttype": "none"}):
            for fmt in ("svg", "png"):
                buf = io.BytesIO()
                fig.savefig(buf, format=fmt, dpi=dpi)  # the layout fits the figure: no second pass to trim it
                path = stem.with_name(f"{stem.name}.{fmt}")
                atomic_write_bytes(path, buf.getvalue())
                out.append(path)
    finally:
        plt.close(fig)
    return out
