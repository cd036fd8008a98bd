"""One way to save a figure: at least MIN_WIDTH_PX wide, its text checked for overlaps on the renderer.

Every plot geosim draws (sweep plots, calibrate's crossval, live validate, the loss curves) saves
through save_png/save_figure, so tests/test_plots.py can ask, for each file written in this process,
which of its labels overlap (LAYOUT): matplotlib knows every text's bounding box once the figure is
drawn, so the check is on the same renderer that writes the PNG, not a guess from font sizes.
"""

from __future__ import annotations

import io
from pathlib import Path

from geosim.base.fileio import write_atomic

MIN_WIDTH_PX = 1200
DPI = 150
# path written -> {"overlaps": pairs of overlapping texts, "texts": every text drawn} (tests read it)
LAYOUT: dict[str, dict] = {}


def texts(fig) -> list:
    """The figure's drawn, non-empty texts (titles, labels, tick labels, legend entries, annotations).
    Tick labels count only for the ticks an axis draws (those inside its view); matplotlib keeps
    labels for the others, which are never drawn."""
    from matplotlib.text import Text

    every_tick, drawn_ticks = set(), []
    for ax in fig.axes:
        if not ax.get_visible():
            continue
        for axis in (ax.xaxis, ax.yaxis):
            for tick in axis.majorTicks + axis.minorTicks:
                every_tick.update((id(tick.label1), id(tick.label2)))
            for tick in axis._update_ticks():  # the ticks the next draw draws
                drawn_ticks += [t for t in (tick.label1, tick.label2) if t.get_visible() and t.get_text().strip()]
    others = [t for t in fig.findobj(Text) if id(t) not in every_tick and t.get_visible() and t.get_text().strip()
              and _shown(t)]
    return others + drawn_ticks


def _shown(artist) -> bool:
    """Visible all the way up (a hidden axes' tick labels are not drawn)."""
    while artist is not None:
        if not artist.get_visible():
            return False
        artist = getattr(artist, "axes", None) if artist is not getattr(artist, "axes", None) else None
    return True


def text_overlaps(fig, slack_px: float = 1.0) -> list[tuple[str, str]]:
    """Pairs of texts whose boxes overlap by more than slack_px on the figure's renderer."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    boxes = []
    for t in texts(fig):
        box = t.get_window_extent(renderer)
        if box.width > 0 and box.height > 0:
            boxes.append((t.get_text(), box.padded(-slack_px)))
    found = []
    for i, (a, box_a) in enumerate(boxes):
        for b, box_b in boxes[i + 1:]:
            if box_a.overlaps(box_b):
                found.append((a, b))
    return found


def width_for(fig, dpi: int = DPI) -> None:
    """Make the figure at least MIN_WIDTH_PX wide at `dpi` (keeping its aspect)."""
    width, height = fig.get_size_inches()
    if width * dpi < MIN_WIDTH_PX:
        scale = MIN_WIDTH_PX / dpi / width
        fig.set_size_inches(width * scale, height * scale)


def png_bytes(fig, *, dpi: int = DPI, extra=(), tight: bool = True) -> bytes:
    width_for(fig, dpi)
    out = io.BytesIO()
    kwargs = {"bbox_inches": "tight", "bbox_extra_artists": list(extra), "pad_inches": 0.15} if tight else {}
    fig.savefig(out, format="png", dpi=dpi, **kwargs)
    return out.getvalue()


def save_png(fig, path: str | Path, *, dpi: int = DPI, extra=(), tight: bool = True) -> Path:
    """Write the figure as a PNG atomically (geosim.base.fileio), recording its text overlaps in LAYOUT."""
    data = png_bytes(fig, dpi=dpi, extra=extra, tight=tight)
    LAYOUT[str(Path(path))] = {"overlaps": text_overlaps(fig), "texts": [t.get_text() for t in texts(fig)]}
    write_atomic(path, data)
    return Path(path)


def png_width(path: str | Path) -> int:
    """The width in pixels a PNG's header gives (IHDR: bytes 16-20, big-endian)."""
    head = Path(path).read_bytes()[:24]
    if head[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError(f"{path} is not a PNG")
    return int.from_bytes(head[16:20], "big")
