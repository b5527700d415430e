"""Following a job's output files as they grow: new lines go to the display, the last lines are kept for the
failure reason. The job writes its files itself, so its output survives dlrun (no pipe to break)."""
from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

LineSink = Callable[[str, str], None]  # (stream name, line)


class Follower:
    """Streams new lines of growing files to the sink, tagged with each file's stream name."""

    def __init__(self, sink: LineSink | None):
        self.sink = sink
        self.offsets: dict[Path, int] = {}
        self.partial: dict[Path, str] = {}

    def poll(self, files: Iterable[tuple[Path, str]], final: bool = False) -> None:
        for path, stream in files:
            try:
                with open(path, errors="replace") as handle:
                    handle.seek(self.offsets.get(path, 0))
                    chunk = handle.read()
                    self.offsets[path] = handle.tell()
            except OSError:
                continue
            text = self.partial.pop(path, "") + chunk
            lines = text.split("\n")
            if not final:
                self.partial[path] = lines.pop()
            for line in lines:
                if line and self.sink:
                    self.sink(stream, line)


def tail_lines(paths: Iterable[Path], count: int = 40) -> list[str]:
    """The last `count` non-blank lines of the files, in order."""
    lines: list[str] = []
    for path in paths:
        try:
            lines += [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
        except OSError:
            continue
    return lines[-count:]
