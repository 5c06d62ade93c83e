"""One kind of table for every command: it fits the console's width without cutting a word short."""

from __future__ import annotations

import copy

from rich.console import Console, ConsoleOptions, RenderResult
from rich.table import Table

KEY = "key"  # a column FitTable never folds or drops: the release, the verdict, the counts


class FitTable(Table):
    """A table that fits the console's width without cutting a word (rich would end a cell in "…").

    Each column is added with `fit`: KEY (never folded, never dropped), a drop rank (an int: when even every
    column at its narrowest word is too wide, the lowest rank gives way first), or None (wraps between words,
    never dropped). Headers wrap between words rather than being cut; the caption names what was dropped.
    """

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("title_justify", "left")
        super().__init__(*args, **kwargs)
        self._fit: list = []

    def add_column(self, header="", justify="left", fit=None, **kwargs) -> None:
        super().add_column(header, justify=justify, overflow="fold", no_wrap=fit == KEY, **kwargs)
        self._fit.append(fit)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield from Table.__rich_console__(self._fitted(console, options), console, options)

    def _fitted(self, console: Console, options: ConsoleOptions) -> Table:
        room = options.max_width
        if not self.columns or Table.__rich_measure__(self, console, options).maximum <= room:
            return self
        t = copy.copy(self)
        t.columns = [copy.copy(c) for c in self.columns]
        fit = dict(zip(map(id, t.columns), self._fit))
        ranked = sorted((c for c in t.columns if isinstance(fit[id(c)], int)), key=lambda c: fit[id(c)])
        dropped = []
        while True:
            for i, c in enumerate(t.columns):
                c._index = i  # rich pads the first and last columns by their index
            sizes = [t._measure_column(console, options.update_width(room), c) for c in t.columns]
            # a KEY column is as wide as its widest cell; any other as its longest word
            least = [m.maximum if fit[id(c)] == KEY else m.minimum for m, c in zip(sizes, t.columns)]
            if sum(least) + t._extra_width <= room or not ranked:
                break
            gone = ranked.pop(0)
            t.columns.remove(gone)
            dropped.append(str(gone.header))
        over = sum(least) + t._extra_width - room
        if over > 0:  # a word wider than the room left (an onnxruntime error's node name): fold inside it
            for i in sorted((i for i, c in enumerate(t.columns) if fit[id(c)] != KEY), key=lambda i: -least[i]):
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
        if dropped:
            note = f"not shown at {room} columns: {', '.join(dropped)} (a wider terminal or --json shows them)"
            t.caption = f"{t.caption}\n{note}" if t.caption else note
            t.caption_justify = "left"
        return t
