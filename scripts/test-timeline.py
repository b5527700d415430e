#!/usr/bin/env python3
"""Where the test suite's time went, per xdist worker, from the lines tests/conftest.py writes when
DLRUN_TEST_TIMELINE names a file: each worker's busy seconds and span, and its slowest tests (set-up, call and
tear-down together). The suite takes as long as its busiest worker: that is the list to shorten.

    scripts/test-timeline.py FILE [--top 15]
"""
from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("timeline", type=Path)
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args()
    per_test: dict[tuple[str, str], float] = defaultdict(float)
    ended: dict[str, list[float]] = defaultdict(list)
    for raw in args.timeline.read_text().splitlines():
        try:
            line = json.loads(raw)
        except json.JSONDecodeError:
            continue  # a line cut by a killed worker
        per_test[(line["worker"], line["test"])] += line["seconds"]
        ended[line["worker"]].append(line["ended"])
    start = min(min(stamps) for stamps in ended.values()) if ended else 0.0
    for worker in sorted(ended):
        tests = sorted(((s, t) for (w, t), s in per_test.items() if w == worker), reverse=True)
        busy = sum(s for s, _ in tests)
        print(f"{worker}: {len(tests)} tests, {busy:.0f} s busy, last ended {max(ended[worker]) - start:.0f} s "
              "after the first test ended")
        for seconds, test in tests[:args.top]:
            print(f"  {seconds:8.1f} s  {test}")


if __name__ == "__main__":
    main()
