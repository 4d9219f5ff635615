"""Many people at once: 8 browser sessions against one real server, each with its own images.

Every session uploads its images one after another and, after each, switches the Image picker
back to its previous image and forward again, for a bounded time. The server must show no exception or error,
load the model once, and hold no more than its memory budget however many images went through it.
bench/load_sessions.py runs the same driver longer on the shipped model and reports the figures.
"""

from browser_harness import require_browser, run_sessions, streamlit_server
from tiny_models import tiny_checkpoint

require_browser()

BUDGET = 2**20  # VITVIZ_MEMORY_BUDGET: 1 MB, less than 24 images of the tiny model need, so entries are evicted


def test_eight_sessions_at_once(tmp_path):
    env = {
        "VITVIZ_DEFAULT_CHECKPOINT": str(tiny_checkpoint(tmp_path / "model.pt")),
        "VITVIZ_SAMPLES": "",
        "VITVIZ_MEMORY_BUDGET": str(BUDGET),
    }
    with streamlit_server(tmp_path, env) as server:
        report = run_sessions(server.url, tmp_path, sessions=8, seconds=0, images=3)
        counts, store = server.counts(), server.store()
        peak = server.peak_memory_mb()
    print(
        f"{report.sessions} sessions, {report.seconds:.0f} s, {report.uploads} uploads, "
        f"{report.control_changes} control changes, counts {counts}, store {store}, peak {peak:.0f} MB"
    )
    assert report.problems == [], "\n".join(report.problems)
    assert report.uploads == 8 * 3 and report.control_changes == 8 * 2 * 2  # every session: 3 images, back and forth
    assert counts["model_loads"] == 1
    assert counts["forward_passes"] >= 8 * 3  # 24 distinct images
    assert store["limit"] == BUDGET
    assert store["max_held"] <= store["peak"] <= BUDGET  # after every run of every session, within the budget
    assert store["evictions"] > 0  # it was full: the budget decided what stayed
