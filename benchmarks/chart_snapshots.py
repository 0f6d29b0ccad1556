"""Look at a plan's charts as a browser draws them: each SVG of a plan directory is loaded in
Qt WebEngine (Chromium's engine, offscreen) and what it paints is saved as PNG beside it.

    pip install PyQt6 PyQt6-WebEngine          # not a parplan dependency
    parplan plan llama-3-70b --gpus 64 --gpu h100 --global-batch 1024 --out plan70b
    QT_QPA_PLATFORM=offscreen python benchmarks/chart_snapshots.py plan70b

A review aid, not a test: it prints the files it wrote; open them to read the charts.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

WIDTH, HEIGHT = 1400, 900  # pixels of the page the charts are drawn on
SETTLE_MS = 1500  # after the load finishes, before the snapshot (fonts, layout)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("plan_dir", type=Path, help="a directory `parplan plan --out` wrote")
    args = parser.parse_args(argv)
    svgs = sorted(args.plan_dir.glob("*.svg"))
    if not svgs:
        parser.error(f"{args.plan_dir}: no .svg files")
    os.environ.setdefault("QTWEBENGINE_CHROMIUM_FLAGS", "--no-sandbox --disable-gpu")
    try:
        from PyQt6.QtCore import QSize, QTimer, QUrl
        from PyQt6.QtWebEngineWidgets import QWebEngineView
        from PyQt6.QtWidgets import QApplication
    except ImportError:
        parser.error("needs PyQt6 and PyQt6-WebEngine (pip install PyQt6 PyQt6-WebEngine)")
    app = QApplication(sys.argv[:1])
    view = QWebEngineView()
    view.resize(QSize(WIDTH, HEIGHT))
    pending = list(svgs)

    def load_next() -> None:
        if not pending:
            app.quit()
            return
        view.load(QUrl.fromLocalFile(str(pending[0].resolve())))

    def snapshot() -> None:
        svg = pending.pop(0)
        out = svg.with_suffix(".browser.png")
        view.grab().save(str(out))
        print(out)
        load_next()

    view.loadFinished.connect(lambda _ok: QTimer.singleShot(SETTLE_MS, snapshot))
    view.show()
    load_next()
    app.exec()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
