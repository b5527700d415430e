"""A real headless Chromium opening a written report: a screenshot of the page, and the DOM after load with
a marker saying how many of its images loaded. Every host name resolves to nothing, so a page that
needed the network would show it."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

CHROMIUM = "chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--hide-scrollbars",
         "--host-resolver-rules=MAP * ~NOTFOUND", "--virtual-time-budget=15000"]
CHECK = """<script>window.addEventListener("load", function () {
  var images = Array.prototype.slice.call(document.images);
  var loaded = images.filter(function (i) { return i.complete && i.naturalWidth > 0; });
  var marker = document.createElement("div");
  marker.id = "dlrun-check";
  marker.setAttribute("data-loaded", loaded.length + "/" + images.length);
  marker.setAttribute("data-sizes", images.map(function (i) { return i.naturalWidth + "x" + i.naturalHeight; }).join(" "));
  document.body.appendChild(marker);
});</script>"""


def _chromium(tmp: Path, *args: str) -> subprocess.CompletedProcess:
    assert shutil.which(CHROMIUM), "chromium is not installed (make sysdeps)"
    return subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={tmp / 'profile'}", *args], capture_output=True,
                          text=True, timeout=180)


def screenshot(out: Path, tmp: Path, width: int = 1280, height: int = 1600) -> Path:
    shot = tmp / "screenshot.png"
    proc = _chromium(tmp, f"--screenshot={shot}", f"--window-size={width},{height}", (out / "index.html").as_uri())
    assert shot.is_file(), proc.stderr[-2000:]
    return shot


def images_loaded(out: Path, tmp: Path) -> tuple[str, list[str]]:
    """("loaded/total", natural sizes) of the page's images, from a copy of the folder with the check added."""
    copy = tmp / "checked"
    shutil.copytree(out, copy)
    page = (copy / "index.html").read_text()
    (copy / "index.html").write_text(page.replace("</body>", CHECK + "</body>"))
    proc = _chromium(tmp, "--dump-dom", (copy / "index.html").as_uri())
    found = re.search(r'<div id="dlrun-check" data-loaded="(\d+/\d+)" data-sizes="([^"]*)"', proc.stdout)
    assert found, f"no load marker in the DOM: {proc.stdout[-500:]} {proc.stderr[-1500:]}"
    return found.group(1), found.group(2).split()


def check_in_browser(out: Path, tmp: Path, page) -> None:
    """Every image of the report loads at its stated size, and the rendered page is the window's size, not
    blank, and shows the plots' colours."""
    from PIL import Image, ImageStat

    loaded, sizes = images_loaded(out, tmp)
    assert loaded == f"{len(page.images)}/{len(page.images)}" and len(page.images) >= 1, loaded
    assert sizes == [f"{img['width']}x{img['height']}" for img in page.images]
    shot = screenshot(out, tmp)
    with Image.open(shot) as image:
        assert image.size == (1280, 1600)
        rgb = image.convert("RGB")
        assert ImageStat.Stat(rgb.convert("L")).stddev[0] > 10, "the rendered page is blank"
        # matplotlib's first colour (tab:blue, #1f77b4) drawn by the plot, i.e. the PNG is on screen
        blue = sum(n for n, (r, g, b) in rgb.getcolors(1 << 24) if abs(r - 31) < 12 and abs(g - 119) < 12
                   and abs(b - 180) < 12)
        assert blue > 100, f"the plot's lines are not on the screenshot ({blue} pixels)"


WIDTH_CHECK = """<script>window.addEventListener("load", function () {
  var wide = Array.prototype.slice.call(document.querySelectorAll("table")).filter(function (t) {
    return t.getBoundingClientRect().right > document.documentElement.clientWidth; });
  var marker = document.createElement("div");
  marker.id = "dlrun-width";
  marker.setAttribute("data-scroll", document.documentElement.scrollWidth);
  marker.setAttribute("data-client", document.documentElement.clientWidth);
  marker.setAttribute("data-wide", wide.map(function (t) { return t.id || "?"; }).join(" "));
  document.body.appendChild(marker);
});</script>"""


def overflow(out: Path, tmp: Path, width: int) -> tuple[int, int, list[str]]:
    """(page width, window width, ids of the tables reaching past the window's right edge) at `width` px."""
    copy = tmp / f"width-{width}"
    shutil.copytree(out, copy)
    page = (copy / "index.html").read_text()
    (copy / "index.html").write_text(page.replace("</body>", WIDTH_CHECK + "</body>"))
    proc = _chromium(tmp, f"--window-size={width},1000", "--dump-dom", (copy / "index.html").as_uri())
    found = re.search(r'<div id="dlrun-width" data-scroll="(\d+)" data-client="(\d+)" data-wide="([^"]*)"', proc.stdout)
    assert found, f"no width marker in the DOM: {proc.stdout[-500:]} {proc.stderr[-1500:]}"
    return int(found.group(1)), int(found.group(2)), found.group(3).split()
