"""Redraw the README's screenshots (docs/*.png): the dashboard on the shipped default model and the bundled photo
of Chelsea the cat, at 1440x900, each tab scrolled to its tab bar.

    python docs/make_screenshots.py          # needs Debian's chromium and the playwright package
"""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from browser_harness import CHROMIUM, CHROMIUM_ARGS, streamlit_server, wait_until_drawn  # noqa: E402
from playwright.sync_api import sync_playwright  # noqa: E402

# file name: (tab, a text the tab shows once drawn)
SHOTS = {"overview.png": ("Overview", "Attention rollout"), "heads.png": ("Heads & layers", "Every head in layer"),
         "click_a_patch.png": ("Click a patch", "Each head: what patch"),
         "class_specific.png": ("Class-specific", "Logit lens")}  # fmt: skip


def main() -> None:
    folder = ROOT / "runs" / "screenshots"
    folder.mkdir(parents=True, exist_ok=True)
    examples = ROOT / "vitviz_dashboard" / "examples"
    with streamlit_server(folder, {"VITVIZ_SAMPLES": str(examples)}) as server, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1440, "height": 900})
        page.goto(server.url, wait_until="domcontentloaded")
        wait_until_drawn(page, "Attention rollout")
        for name, (tab, text) in SHOTS.items():
            page.get_by_role("tab", name=tab).click()
            wait_until_drawn(page, text)
            # scroll the page's main area so the prediction line, the model's input and the tab bar sit at the top
            page.evaluate("""() => { const main = document.querySelector('[data-testid=stMain]');
                const caption = [...document.querySelectorAll('[data-testid=stImageCaption]')]
                    .find(e => e.innerText.startsWith('What the model saw'));
                const row = caption.closest('[data-testid=stHorizontalBlock]');
                main.scrollTop += row.getBoundingClientRect().top - 72; }""")  # below the 60 px header
            page.wait_for_timeout(800)
            page.screenshot(path=str(ROOT / "docs" / name))
            print("wrote", ROOT / "docs" / name)
        browser.close()


if __name__ == "__main__":
    main()
