"""How long `check --from-megatron`'s script reader takes on large scripts (figures, no
assertion): each case of tests/test_shell_script.py's LARGE_SCRIPTS, best of N runs.

    python benchmarks/script_speed.py [--repeat N]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from test_shell_script import LARGE_SCRIPTS

from parplan_gen.inputs.shell_script import script_words


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    for name, (text, _) in LARGE_SCRIPTS.items():
        best = float("inf")
        for _ in range(args.repeat):
            start = time.perf_counter()
            script_words(text)
            best = min(best, time.perf_counter() - start)
        print(f"{name:20s} {len(text):>9,} chars  {best * 1000:8.1f} ms")


if __name__ == "__main__":
    main()
