"""Many people at once: 8 browser sessions against one real server, each with its own images.

Every session uploads its images one after another and, after each, switches the Image picker
back to its previous image and forward again, for a bounded time. The server must show no exception or error, load the model once, and keep every cache
within its max_entries however many images went through it. bench/load_sessions.py runs the
same driver longer on the shipped model and reports the figures.
"""

from browser_harness import require_browser, run_sessions, streamlit_server
from tiny_models import tiny_checkpoint

require_browser()

# vitviz_dashboard/cached.py's max_entries for the st.cache_resource caches an image goes through (Streamlit's
# metrics count their entries; for st.cache_data they give bytes, reported but not bounded here)
MAX_ENTRIES = {"decode": 64, "display_photo": 64, "analyse": 8, "rollout_map": 64, "class_map": 64, "logit_lens": 16,
               "statistics": 32, "get_model": 3}  # fmt: skip


def test_eight_sessions_at_once(tmp_path):
    env = {"VITVIZ_DEFAULT_CHECKPOINT": str(tiny_checkpoint(tmp_path / "model.pt")), "VITVIZ_SAMPLES": ""}
    with streamlit_server(tmp_path, env) as server:
        report = run_sessions(server.url, tmp_path, sessions=8, seconds=0, images=3)
        counts, sizes = server.counts(), server.cache_sizes()
        peak = server.peak_memory_mb()
    print(f"{report.sessions} sessions, {report.seconds:.0f} s, {report.uploads} uploads, "
          f"{report.control_changes} control changes, counts {counts}, caches {sizes}, peak {peak:.0f} MB")  # fmt: skip
    assert report.problems == [], "\n".join(report.problems)
    assert report.uploads == 8 * 3 and report.control_changes == 8 * 2 * 2  # every session: 3 images, back and forth
    assert counts["model_loads"] == 1
    assert counts["forward_passes"] >= 8 * 3  # 24 distinct images
    entries = sizes["entries"]
    assert entries["analyse"] == MAX_ENTRIES["analyse"] < counts["forward_passes"]  # full, older ones evicted
    for name, bound in MAX_ENTRIES.items():
        assert entries.get(name, 0) <= bound, (name, entries)
