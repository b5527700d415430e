"""Helpers for the report tests: a store of two systems and two fabrics, the model-facts cache filled so that
no test imports PyTorch to count a model, and reading a written report back (HTML, image maps, PNG pixels)."""
from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

from compare_data import add

from dlrun.images.digest import file_sha256
from dlrun.paths import HARNESS_DIR
from dlrun.results.store import Store


def no_model_counts(cache: Path, models: tuple[str, ...] = ("resnet50_v1.5", "trivial")) -> dict[str, str]:
    """XDG_CACHE_HOME with the model-facts cache saying the models have no count (efficiency columns
    unknown, nothing counted): the report tests are about the report, not about counting."""
    path = cache / "dlrun" / "model-facts.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"harness_sha256": file_sha256(HARNESS_DIR / "harness_pytorch.py"),
                                "models": dict.fromkeys(models)}))
    return {"XDG_CACHE_HOME": str(cache)}


def fill(home: Path, *, odd_batch: bool = True) -> Store:
    """dgx2 and dgx1v on 1 to 16 devices (16 on two nodes, over ib and tcp), three repeats each; with
    `odd_batch`, two runs at another batch size (not like-for-like)."""
    store = Store(home / "results.sqlite")
    for system, factor in (("dgx2", 1.0), ("dgx1v", 0.8)):
        for devices in (1, 2, 4, 8, 16):
            nodes = 1 if devices <= 8 else 2
            for fabric in (["ib", "tcp"] if nodes > 1 else ["tcp"]):
                base = 100 * factor * devices ** 0.9 * (0.85 if fabric == "tcp" and nodes > 1 else 1)
                add(store, [base * 0.98, base, base * 1.02], system=system, devices=devices, nodes=nodes,
                    fabric=fabric, site="site-a" if system == "dgx2" else "site-b")
    if odd_batch:
        add(store, [90.0, 91.0], system="dgx2", devices=1, batch=32, site="site-a")
    return store


class Page(HTMLParser):
    """Ids, links, image maps, images and table rows of a page."""

    def __init__(self, text: str):
        super().__init__()
        self.ids: set[str] = set()
        self.links: list[str] = []
        self.areas: list[dict[str, str]] = []
        self.images: list[dict[str, str]] = []
        self.rows: dict[str, dict[str, str]] = {}
        self.tables: set[str] = set()
        self.text = text
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        attrs = {k: v or "" for k, v in attrs}
        if "id" in attrs:
            self.ids.add(attrs["id"])
        if tag == "a" and "href" in attrs:
            self.links.append(attrs["href"])
        elif tag == "area":
            self.areas.append(attrs)
        elif tag == "img":
            self.images.append(attrs)
        elif tag == "tr" and "id" in attrs:
            self.rows[attrs["id"]] = attrs
        elif tag == "table" and "id" in attrs:
            self.tables.add(attrs["id"])
        if "src" in attrs or "href" in attrs:
            target = attrs.get("src") or attrs.get("href")
            assert not re.match(r"^(https?:)?//", target), f"the page fetches {target}"


def read(out: Path) -> Page:
    return Page((out / "index.html").read_text())


def check_png(path: Path, width: int, height: int) -> None:
    """The PNG has the size the page says and is not blank."""
    from PIL import Image, ImageStat

    with Image.open(path) as image:
        assert image.size == (width, height), (path, image.size)
        grey = image.convert("L")
        stat = ImageStat.Stat(grey)
        assert stat.stddev[0] > 10, f"{path} is (nearly) blank: pixel stdev {stat.stddev[0]:.1f}"
        assert len(grey.getcolors(256 * 256) or []) > 20, f"{path} has almost no distinct shades"
        coloured = image.convert("RGB").getcolors(1 << 24) or []
        assert sum(1 for _, (r, g, b) in coloured if max(r, g, b) - min(r, g, b) > 60) > 10, "no coloured lines"
