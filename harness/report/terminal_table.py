"""One kind of table for every command: it fits the console's width without cutting a word short."""

from __future__ import annotations

import copy

from rich import box
from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderResult
from rich.table import Table
from rich.text import Text

KEY = "key"  # a column FitTable never folds or drops: the release, the verdict, the counts


class FitTable(Table):
    """A table that fits the console's width without cutting a word (rich would end a cell in "…").

    Each column is added with `fit`: KEY (never folded, never dropped), a drop rank (an int: when even every
    column at its narrowest word is too wide, the lowest rank gives way first), or None (wraps between words,
    never dropped). Headers wrap between words rather than being cut; the caption names what was dropped.

    A column added with `shorten=N` (names: an onnx tensor's, a node's) keeps each cell on one line: a cell
    wider than the column loses its middle to "…" (the start and the end stay, where onnx names differ), down
    to N characters, once every column of a drop rank below `whole_over` has given way. `compact`: a table too wide for its box is drawn without one (a rule under the header,
    two spaces between columns), which leaves the room to its cells.
    """

    def __init__(self, *args, compact: bool = False, **kwargs):
        kwargs.setdefault("title_justify", "left")
        super().__init__(*args, **kwargs)
        self._fit: list = []
        self._shorten: list[int | None] = []
        self._compact = compact

    def add_column(self, header="", justify="left", fit=None, shorten: int | None = None, whole_over: int = 0,
                   **kwargs) -> None:
        super().add_column(header, justify=justify, overflow="fold", no_wrap=fit == KEY or bool(shorten), **kwargs)
        self._fit.append(fit)
        self._shorten.append((shorten, whole_over) if shorten else None)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield from Table.__rich_console__(self._fitted(console, options), console, options)

    def _fitted(self, console: Console, options: ConsoleOptions) -> Table:
        room = options.max_width
        if not self.columns or Table.__rich_measure__(self, console, options).maximum <= room:
            return self
        t = copy.copy(self)
        t.columns = [copy.copy(c) for c in self.columns]
        if self._compact:
            t.box, t.show_edge, t.padding = box.SIMPLE_HEAD, False, 0
        fit = dict(zip(map(id, t.columns), self._fit))
        shorten = dict(zip(map(id, t.columns), self._shorten))
        ranked = sorted((c for c in t.columns if isinstance(fit[id(c)], int)), key=lambda c: fit[id(c)])
        dropped = []
        while True:
            for i, c in enumerate(t.columns):
                c._index = i  # rich pads the first and last columns by their index
            sizes = [t._measure_column(console, options.update_width(room), c) for c in t.columns]
            # a KEY column is as wide as its widest cell; a shortened one too while a column it is kept whole over
            # is left, then as its least; any other as its longest word
            below = fit[id(ranked[0])] if ranked else None
            least = [m.maximum if fit[id(c)] == KEY else m.minimum if not shorten[id(c)] else
                     m.maximum if below is not None and below < shorten[id(c)][1] else
                     min(m.maximum, shorten[id(c)][0] + t._get_padding_width(c._index))
                     for m, c in zip(sizes, t.columns)]
            if sum(least) + t._extra_width <= room or not ranked:
                break
            gone = ranked.pop(0)
            t.columns.remove(gone)
            dropped.append(str(gone.header))
        over = sum(least) + t._extra_width - room
        if over > 0:  # a word wider than the room left (an onnxruntime error's node name): fold inside it
            for i in sorted((i for i, c in enumerate(t.columns) if fit[id(c)] != KEY and not shorten[id(c)]),
                            key=lambda i: -least[i]):
                cut = min(over, max(0, least[i] - 8))
                least[i] -= cut
                over -= cut
        # what is left over goes to the columns that would be wider, by how much wider (never past that)
        spare = max(0, room - t._extra_width - sum(least))
        wants = [max(0, m.maximum - low) for m, low in zip(sizes, least)]
        total = sum(wants)
        for c, low, want in zip(t.columns, least, wants):
            given = want if spare >= total else spare * want // total
            c.width = max(1, low + given - t._get_padding_width(c._index))
            if shorten[id(c)]:
                c._cells = [middle(console.render_str(cell) if isinstance(cell, str) else cell, c.width)
                            for cell in c._cells]
        if dropped:
            note = f"not shown at {room} columns: {', '.join(dropped)} (a wider terminal or --json shows them)"
            t.caption = f"{t.caption}\n{note}" if t.caption else note
            t.caption_justify = "left"
        return t


def middle(text, width: int):
    """`text` in at most `width` cells: its middle given way to "…" where it is wider (a renderable other than
    Text is left as it is)."""
    if not isinstance(text, Text) or text.cell_len <= width or width < 3:
        return text
    plain, room = text.plain, width - 1
    head = _fitting(plain, (room + 1) // 2)
    tail = len(plain) - _fitting(plain[::-1], room - cell_len(plain[:head]))
    out = text[:head]
    out.append("…")
    out.append_text(text[tail:])
    return out


def _fitting(s: str, cells: int) -> int:
    """How many of the first characters of `s` fit in `cells` terminal cells."""
    n = used = 0
    for ch in s:
        used += cell_len(ch)
        if used > cells:
            break
        n += 1
    return n
