"""The HTML report in a real browser (headless Chromium): its front page, a figure and the main table.

usage: check_report.py REPORT.html OUT_DIR PRESET

The report is one page whose entries open by clicking, so each view is a copy of the report with a
script that clicks its way there (a category, a subcategory, an entry's view button). Chromium
screenshots each view and dumps its DOM; the check fails unless the front page names the resolved
preset and grid and shows what made the results (their provenance), the figure view shows the PNG (and the screenshot holds the figure's colours), and
the table view shows the main table's rows. The screenshots stay in OUT_DIR to be looked at.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
from matplotlib import image

CLICK = """
function rowButton(name) {  // the view (eye) button of the entry named `name`
  const cell = [...document.querySelectorAll('td')].find(td => td.textContent.trim() === name);
  return cell && cell.parentElement.querySelector('a[iconname=eye]');
}
function byText(text) {
  const found = [...document.querySelectorAll('a,button,li,div,span,td,p')].filter(e => e.textContent.trim() === text);
  return found[found.length - 1];
}
const steps = STEPS;
steps.forEach((step, i) => setTimeout(() => {
  const target = step.startsWith('view:') ? rowButton(step.slice(5)) : byText(step);
  if (target) target.click(); else document.title = 'missing: ' + step;
}, 700 * (i + 1)));
"""
VPO_BLUE = np.array([0x00, 0x72, 0xB2]) / 255  # vpo.report.kit.method_style("vpo")["color"]


def browser() -> str:
    for name in ("chromium-headless-shell", "chromium", "google-chrome"):
        if shutil.which(name):
            return name
    sys.exit("no headless Chromium found (Debian: apt-get install chromium-headless-shell)")


def view(report: Path, steps: list[str], out: Path) -> tuple[np.ndarray, str]:
    """Screenshot (RGB array) and DOM of the report after clicking through `steps`."""
    html = report.read_text()
    head, body_end, tail = html.rpartition("</body>")
    page = out.with_suffix(".html")
    page.write_text(head + "<script>" + CLICK.replace("STEPS", json.dumps(steps)) + "</script>" + body_end + tail)
    flags = [browser(), "--no-sandbox", "--disable-gpu", f"--virtual-time-budget={700 * (len(steps) + 2)}",
             "--window-size=1400,1000", f"file://{page}"]
    subprocess.run(flags[:-1] + [f"--screenshot={out}", flags[-1]], check=True, capture_output=True, timeout=120)
    dom = subprocess.run(flags[:-1] + ["--dump-dom", flags[-1]], check=True, capture_output=True, text=True,
                         timeout=120).stdout
    page.unlink()
    return image.imread(out)[..., :3], dom


def drawn_share(pixels: np.ndarray) -> float:
    """Share of pixels that are not near-white (the page is not blank)."""
    return float((pixels.min(axis=-1) < 0.9).mean())


def main(report: str, out_dir: str, preset: str) -> int:
    report, out = Path(report), Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    problems = []
    front, dom = view(report, [], out / "report_front.png")
    if drawn_share(front) < 0.02:
        problems.append("the front page is blank")
    if f"This run: preset <strong>{preset}</strong>" not in dom:
        problems.append(f"the front page does not name the resolved preset {preset!r}")
    if "What made the results" not in dom or "code: commit " not in dom:
        problems.append("the front page does not show the results' provenance (aggregate/provenance.json)")
    figure, dom = view(report, ["Figures", "main results", f"view:figures/{preset}/pass_at_k.png"], out / "report_figure.png")
    blue = (np.abs(figure - VPO_BLUE).max(axis=-1) < 0.06).sum()
    if "data:image/png" not in dom.split("<nav", 1)[-1] or blue < 200:
        problems.append(f"the pass@k figure is not shown ({blue} VPO-blue pixels)")
    table, dom = view(report, ["Tables", "main results", f"view:results/{preset}/tables/main_table.html"], out / "report_table.png")
    frame = [part for part in dom.split("<iframe")[1:] if "main_table" in part or "text/html" in part]
    if not frame or drawn_share(table) < 0.02 or (table != front[:, :, :3]).mean() < 0.05:
        problems.append("the main table is not shown (no frame with it, or the view did not change)")
    for problem in problems:
        print(f"report check: {problem}", file=sys.stderr)
    print(f"report check: {'failed' if problems else 'ok'}; screenshots in {out}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
